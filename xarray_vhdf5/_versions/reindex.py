"""Rebuilding a raw_data whose HDF5 chunk index libhdf5 cannot read (``vhdf5 check --repair``).

libhdf5 finds a chunk of raw_data through the dataset's chunk index (a
B-tree of chunk offsets and addresses), which it rewrites in place when a
commit adds chunks. A process killed while libhdf5 flushes a plain
``h5py.File`` can leave a node of it torn ("wrong B-tree signature",
measured once in 400 kills of a deletion followed by a commit:
``docs/benchmarks.md``). The chunks themselves are whole, but libhdf5 (and so
h5py, versioned-hdf5 and every netCDF tool) can no longer read the versions
that map chunks under that node; this package's reader still can, as it reads
chunks by their byte ranges from the address table its commits keep
(:mod:`~xarray_vhdf5._versions.chunkmaps`).

:func:`reindex` rebuilds such a raw_data from what is still known of each of
its chunks, in this order:

1. where libhdf5's chunk index still reaches it (``H5Dchunk_iter`` up to the
   torn node, then ``H5Dget_chunk_info_by_coord``, whose lookup of one chunk
   passes through other nodes): its stored bytes as libhdf5 reads them
   (``H5Dread_chunk``);
2. else the address table's row for it: the byte range a commit of this
   package recorded (only rows below the hash table's ``largest_index``, of a
   table written for this raw_data and hash table), read from the file.

A new dataset with raw_data's type, shape, creation properties (chunks,
filters, fill value) and attributes takes each chunk's stored bytes as they
are (``H5Dwrite_chunk``, with its filter mask), and takes raw_data's name,
so that every version's virtual dataset, which names its source dataset by
path, maps it. The old raw_data is parked in the bookkeeping group
(``/__vhdf5__/damaged_datasets``; libhdf5 would read its chunk index to free
it), so no byte of it is lost or reused. A chunk neither source gives is left
unwritten (it reads as the fill value).

Nothing here decides what the copied bytes are worth: the repair checks the
file again reading and hashing every chunk (SHA-256, as the hash table says
it must be), and rolls back the versions whose chunks do not match, as for
any other damaged chunk (:func:`~xarray_vhdf5._versions.repair.repair`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import h5py
import numpy as np
from h5py import h5d

from .._backend.layout import VERSION_DATA
from . import bookkeeping, chunkmaps
from .chunkcheck import DAMAGE_ERRORS
from .mutation import file_name, mutating
from .objects import dataset_paths

__all__ = ["ReindexReport", "reindex", "table_chunks_end", "unindexed"]

#: The name the new raw_data is built under, beside the old one, before it takes its name.
_BUILDING = "raw_data_reindexed"


@dataclass
class ReindexReport:
    """What :func:`reindex` did to one dataset's raw_data.

    Attributes
    ----------
    path : str
        The dataset's path inside the versions.
    chunks : int
        raw_data's chunks (its length along axis 0 over the chunk length).
    from_index : int
        Chunks copied as libhdf5's chunk index still reached them.
    from_table : int
        Chunks copied from the address table's byte ranges.
    missing : list of int
        Chunk numbers (first row over the chunk length) neither gave: left
        unwritten, they read as the fill value.
    parked : str
        Where the old raw_data was moved (a path in the bookkeeping group).
    """

    path: str
    chunks: int
    from_index: int = 0
    from_table: int = 0
    missing: list[int] = field(default_factory=list)
    parked: str = ""

    def __str__(self) -> str:
        text = (
            f"{self.path}: {self.chunks} chunks, {self.from_index} as libhdf5's index still reached them, "
            f"{self.from_table} from the address table"
        )
        if self.missing:
            text += f", {len(self.missing)} found nowhere (left as fill value)"
        return f"{text}; the old raw_data parked in {self.parked}"


def unindexed(h5file: h5py.Group) -> list[str]:
    """Paths of the versioned datasets whose raw_data chunk index libhdf5 cannot walk (``H5Dchunk_iter``).

    A raw_data libhdf5 cannot open at all is not listed (nothing is known of
    its type or shape to rebuild it with).
    """
    found = []
    for path in dataset_paths(h5file):
        try:
            raw = h5file[f"{VERSION_DATA}/{path}/raw_data"]
        except DAMAGE_ERRORS:
            continue
        if not isinstance(raw, h5py.Dataset) or raw.chunks is None:
            continue
        try:
            raw.id.chunk_iter(lambda info: None)
        except DAMAGE_ERRORS:
            found.append(path)
    return found


def table_chunks_end(h5file: h5py.Group, path: str) -> int:
    """Where the last chunk ``path``'s address table places inside the file ends (bytes; 0: none or no table).

    For moving the end of allocation past chunks before a repair writes
    (:func:`~xarray_vhdf5._versions.repair.chunks_end`) when libhdf5's chunk
    index cannot be walked.
    """
    try:
        raw = h5file[f"{VERSION_DATA}/{path}/raw_data"]
        rows = chunkmaps.stored_addresses(h5file.file, path, raw)
    except DAMAGE_ERRORS:
        return 0
    if rows is None:
        return 0
    size = int(h5file.file.id.get_filesize())
    inside = (rows[:, 0] != chunkmaps.UNKNOWN) & (rows[:, 1] > 0) & (rows[:, 0] <= size)
    return int((rows[inside, 0] + rows[inside, 1]).max()) if inside.any() else 0


def reindex(h5file: h5py.Group, paths: list[str]) -> list[ReindexReport]:
    """Rebuild the raw_data of each dataset of ``paths`` from its chunks' stored bytes (the module docstring).

    One mutation (:func:`~xarray_vhdf5._versions.mutation.mutating`, chunks
    moved: readers resolve their chunks again), journaled through a handle of
    :func:`~xarray_vhdf5._versions.mutation.open_file`.

    Parameters
    ----------
    h5file : h5py.File or h5py.Group
        The file, open writable.
    paths : list of str
        Datasets to rebuild (:func:`unindexed`).

    Returns
    -------
    list of ReindexReport
        One per dataset, in the order of ``paths``.

    Raises
    ------
    FileBusyError, StaleVersionError
        Another writer holds the file, or wrote it since this handle read it;
        nothing was changed.
    OSError, RuntimeError, KeyError, ValueError
        libhdf5 failed creating or linking the new raw_data (the mutation is
        rolled back through a journaled handle).
    """
    if not paths:
        return []
    # Read before the mutation, which drops the address tables (chunks are about to move).
    plans = [_plan(h5file, path) for path in paths]
    name = file_name(h5file)
    reports = []
    with mutating(h5file, moves=True, what="repair"), open(name, "rb", buffering=0) as fh:
        for path, (tables, known) in zip(paths, plans):
            reports.append(_rebuild(h5file, path, tables, known, fh.fileno()))
    return reports


def _plan(h5file: h5py.Group, path: str) -> tuple[np.ndarray | None, dict[int, tuple[int, int, int]]]:
    """``(address table rows or None, chunk number -> (offset, size, mask) as libhdf5's index still gives them)``."""
    raw = h5file[f"{VERSION_DATA}/{path}/raw_data"]
    c0 = raw.chunks[0]
    known: dict[int, tuple[int, int, int]] = {}

    def visit(info) -> None:
        offset = info.chunk_offset
        if info.byte_offset is not None and not any(offset[1:]) and offset[0] % c0 == 0:
            known[offset[0] // c0] = (int(info.byte_offset), int(info.size), int(info.filter_mask))

    try:
        raw.id.chunk_iter(visit)  # up to the torn node: what it visited counts
    except DAMAGE_ERRORS:
        pass
    total = -(-raw.shape[0] // c0)
    zeros = (0,) * (raw.ndim - 1)
    for k in range(total):
        if k in known:
            continue
        try:  # a lookup of one chunk descends through other nodes
            info = raw.id.get_chunk_info_by_coord((k * c0, *zeros))
        except DAMAGE_ERRORS:
            continue
        if info.byte_offset is not None:
            known[k] = (int(info.byte_offset), int(info.size), int(info.filter_mask))
    try:
        tables = chunkmaps.stored_addresses(h5file.file, path, raw)
    except DAMAGE_ERRORS:
        tables = None
    return tables, known


def _rebuild(
    h5file: h5py.Group, path: str, table: np.ndarray | None, known: dict[int, tuple[int, int, int]], fd: int
) -> ReindexReport:
    """Build the new raw_data of ``path`` beside the old one, then swap their links (inside the mutation)."""
    group = h5file[f"{VERSION_DATA}/{path}"]
    raw = group["raw_data"]
    c0 = raw.chunks[0]
    total = -(-raw.shape[0] // c0)
    zeros = (0,) * (raw.ndim - 1)
    size = os.fstat(fd).st_size
    out = ReindexReport(path, total)
    if _BUILDING in group:  # left by a plain handle's run that was killed: rebuilt from scratch
        group.move(_BUILDING, bookkeeping.parking_place(h5file, "datasets", f"{path}/{_BUILDING}"))
    new = h5py.Dataset(
        h5d.create(group.id, _BUILDING.encode(), raw.id.get_type(), raw.id.get_space(), dcpl=raw.id.get_create_plist())
    )
    for key in raw.attrs:
        new.attrs.create(key, raw.attrs[key], dtype=raw.attrs.get_id(key).dtype)
    for k in range(total):
        chunk = _stored_chunk(raw, k * c0, zeros, known.get(k), table, k, fd, size)
        if chunk is None:
            out.missing.append(k)
            continue
        mask, data, source = chunk
        new.id.write_direct_chunk((k * c0, *zeros), data, filter_mask=mask)
        if source == "index":
            out.from_index += 1
        else:
            out.from_table += 1
    out.parked = bookkeeping.parking_place(h5file, "datasets", f"{path}/raw_data")
    h5file.move(raw.name, out.parked)  # a link move: libhdf5 reads no chunk index for it
    group.move(_BUILDING, "raw_data")
    return out


def _stored_chunk(
    raw: h5py.Dataset,
    row: int,
    zeros: tuple[int, ...],
    indexed: tuple[int, int, int] | None,
    table: np.ndarray | None,
    k: int,
    fd: int,
    size: int,
) -> tuple[int, bytes, str] | None:
    """``(filter mask, stored bytes, source)`` of raw_data's chunk ``k`` (first row ``row``), or None."""
    if indexed is not None:
        try:
            mask, data = raw.id.read_direct_chunk((row, *zeros))
            return int(mask), bytes(data), "index"
        except DAMAGE_ERRORS:
            pass
    if table is None or k >= len(table):
        return None
    offset, nbytes, mask = (int(v) for v in table[k])
    if offset == int(chunkmaps.UNKNOWN) or nbytes == 0 or offset + nbytes > size:
        return None
    try:
        data = os.pread(fd, nbytes, offset)
    except OSError:
        return None
    return (mask, data, "table") if len(data) == nbytes else None
