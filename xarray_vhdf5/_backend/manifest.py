"""A committed version's dataset as a manifest of immutable byte ranges, read without libhdf5.

Committed chunks never change in place: raw_data only grows, and each of its
chunks is written once, whole (``docs/format.md``, "Layout"). So once a version's
virtual dataset is resolved, each of its chunks named by the file offset,
stored size and filter mask of the raw_data chunk it maps, its points can be
read with ``os.pread`` and decoded here, with no libhdf5 call, while another
process updates the file's HDF5 metadata in place::

    virtual dataset (one version)         manifest                      file
    chunk (0, 0) -> raw_data rows 0:10    slot 0: bytes 4016:5216   ->  [..chunk..]
    chunk (0, 1)    unmapped              slot -1: the fill value
    chunk (1, 0) -> raw_data rows 0:10    slot 0 (deduplicated)

Only rewriting raw_data invalidates a manifest: deleting versions (which
compacts it) and ``modify_metadata``; resolve again after those.

:func:`resolve_manifest` is the one libhdf5 step: the mappings, through
:func:`~xarray_vhdf5._backend.chunkmap.build_slab_indices_and_offsets`; the
chunks' addresses, through ``H5Dchunk_iter`` (every chunk of raw_data) or, when
the version maps few of them, ``H5Dget_chunk_info_by_coord`` per chunk; raw_data's
filter pipeline (``H5Pget_filter2``), dtype, chunks and fill value.
:meth:`ChunkManifest.read` then reads and decodes only the chunks a selection
touches. A dataset whose chunks cannot be decoded here (variable-length
strings, which point into HDF5's global heap; a filter without a decoder) gets
a manifest with ``supported`` False and the reason: read it through h5py.

Decoders (HDF5 User Guide, "HDF5 Datasets", filters; bit ``i`` of a chunk's
filter mask is set when filter ``i`` of the pipeline was skipped for it, as an
optional filter is when it cannot shrink the chunk). All are applied in
reverse pipeline order:

- deflate (1, a zlib stream): libdeflate, ``imagecodecs.deflate_decode``;
- shuffle (2): ``numcodecs.Shuffle`` (HDF5's byte shuffle, checked against it);
- fletcher32 (3): HDF5's own ``H5_checksum_fletcher32`` in
  ``imagecodecs.h5checksum_fletcher32``, accepting what H5Zfletcher32.c
  accepts (the sum, or the sum with the bytes of each 16-bit half swapped);
- h5py's LZF (32000, raw LZF without header): ``imagecodecs.lzf_decode``;
- hdf5plugin's Blosc (32001), LZ4 (32004, HDF5's block framing) and Zstandard
  (32015): ``imagecodecs.blosc_decode``, ``lz4h5_decode``, ``zstd_decode``.

szip, nbit, scaleoffset and other plugins (bitshuffle, ...) are unsupported.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import h5py
import imagecodecs
import numcodecs
import numpy as np
from h5py import h5d

from ..errors import CorruptFileError, UnsupportedError
from .chunkmap import build_slab_indices_and_offsets, version_dataset_layout
from .hashing import chunk_hash
from .hashtable import hash_table_path

__all__ = ["DECODED_FILTERS", "ChunkManifest", "chunk_addresses", "manifest_from_starts", "resolve_manifest"]


def _fletcher32(data: memoryview, cd: tuple, size: int) -> memoryview:
    """Check and strip HDF5's Fletcher-32 checksum (H5Zfletcher32.c: 4 bytes, little-endian, at the end).

    Raises
    ------
    ValueError
        Fewer than 4 bytes, or neither the sum nor its half-swapped form (HDF5 < 1.6.3) matches.
    """
    if len(data) < 4:
        raise ValueError("shorter than its 4-byte Fletcher-32 checksum")
    stored = int.from_bytes(data[-4:], "little")
    computed = imagecodecs.h5checksum_fletcher32(data[:-4])  # type: ignore[arg-type]  # takes any buffer
    swapped = ((computed & 0x00FF00FF) << 8) | ((computed >> 8) & 0x00FF00FF)
    if stored not in (computed, swapped):
        raise ValueError(f"Fletcher-32 checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")
    return data[:-4]


#: HDF5 filter id -> ``decode(data, cd_values, size)``; ``size``: the bytes it decodes to,
#: exact when only fletcher32 precedes a compressor in the pipeline (as h5py orders them).
DECODED_FILTERS = {
    h5py.h5z.FILTER_DEFLATE: lambda data, cd, size: imagecodecs.deflate_decode(data, out=size),
    h5py.h5z.FILTER_SHUFFLE: lambda data, cd, size: numcodecs.Shuffle(cd[0] if cd else 1).decode(data),
    h5py.h5z.FILTER_FLETCHER32: _fletcher32,
    32000: lambda data, cd, size: imagecodecs.lzf_decode(data, out=size),  # h5py's LZF
    32001: lambda data, cd, size: imagecodecs.blosc_decode(data),  # hdf5plugin's Blosc
    32004: lambda data, cd, size: imagecodecs.lz4h5_decode(data),  # hdf5plugin's LZ4
    32015: lambda data, cd, size: imagecodecs.zstd_decode(data),  # hdf5plugin's Zstandard
}

# Finding chunk addresses, in units of one chunk of raw_data walked (HDF5 2.0 through h5py):
# H5Dget_chunk_info_by_coord walks the chunk index up to the chunk asked for, costing
# _LOOKUP_START plus its position; H5Dchunk_iter visits every chunk of raw_data (every
# version's) at _ITER_COST each.
_LOOKUP_START, _ITER_COST = 90, 58


def resolve_manifest(vds: h5py.Dataset, *, verify: bool = False, addresses=None) -> ChunkManifest:
    """Resolve one versioned dataset of one version into a :class:`ChunkManifest`.

    Parameters
    ----------
    vds : h5py.Dataset
        A version's virtual dataset (``_version_data/versions/<v>/<name>``,
        with the format's ``chunks`` and ``raw_data`` attributes) in a file
        opened freshly, with the default ``sec2`` or the ``stdio`` driver, so
        that every chunk it maps is on disk.
    verify : bool
        Also record each stored chunk's SHA-256 digest from the hash table,
        and make :meth:`ChunkManifest.read` check every chunk it reads by
        default.
    addresses : callable, optional
        Where the chunks lie, as :func:`manifest_from_starts` takes it (a
        stored address table); default: asked of libhdf5.

    Returns
    -------
    ChunkManifest
        With ``supported`` False (and ``reason``) when the chunks cannot be
        decoded without libhdf5: read ``vds`` through h5py then.

    Raises
    ------
    TypeError
        ``vds`` is not an h5py dataset.
    xarray_vhdf5.errors.IncompatibleDataError
        ``vds`` lacks the format's ``chunks``/``raw_data`` attributes.
    xarray_vhdf5.errors.CorruptFileError
        The raw_data ``vds`` names is missing, a mapping reads points past
        its end, or (``verify``) a mapped raw_data chunk has no row in the
        hash table.
    """
    if not isinstance(vds, h5py.Dataset):
        raise TypeError(f"vds must be an h5py.Dataset, got {type(vds).__name__}")
    chunks, raw_path = version_dataset_layout(vds)
    raw = vds.file.get(raw_path)
    if not isinstance(raw, h5py.Dataset):
        path = os.path.abspath(vds.file.filename)
        raise CorruptFileError(f"{path}: dataset {vds.name} names raw_data {raw_path}, which is missing", path=path)
    shape, dtype = vds.shape, vds.dtype
    grid = tuple(-(-n // c) for n, c in zip(shape, chunks))
    reasons = []
    # h5py keeps the virtual dataset's creation property list (a new copy holds every mapping)
    vds_dcpl = getattr(vds, "_dcpl", None) or vds.id.get_create_plist()
    if vds_dcpl.fill_value_defined() == h5d.FILL_VALUE_UNDEFINED:
        reasons.append("the virtual dataset has no fill value (libhdf5 leaves unwritten points unset)")
    if dtype.hasobject:
        reasons.append(f"dtype {dtype} holds variable-length data (references into HDF5's global heap)")
    elif dtype.subdtype is not None or raw.dtype != dtype:
        reasons.append(f"the virtual dataset's dtype {dtype} is converted from raw_data's {raw.dtype}")
    try:
        indices, offsets = build_slab_indices_and_offsets(vds, shape, chunks, raw)
    except ValueError as exc:  # mappings libhdf5 reads but raw_data's chunks cannot express
        reasons.append(str(exc))
        indices, offsets = np.zeros(grid, np.intp), np.zeros(grid, np.uint64)
    starts = np.where(indices != 0, offsets.astype(np.int64), -1)
    fill = np.zeros((), dtype) if dtype.hasobject else np.asarray(vds.fillvalue, dtype)
    return manifest_from_starts(
        vds.name, raw, shape, chunks, dtype, fill, starts, verify=verify, reasons=reasons, addresses=addresses
    )


def manifest_from_starts(
    name: str,
    raw: h5py.Dataset,
    shape: tuple[int, ...],
    chunks: tuple[int, ...],
    dtype: np.dtype,
    fillvalue: np.ndarray,
    starts: np.ndarray,
    *,
    addresses: Callable[[np.ndarray], np.ndarray] | None = None,
    verify: bool = False,
    reasons: list[str] | None = None,
) -> ChunkManifest:
    """A :class:`ChunkManifest` from a version's chunk map, however it was found.

    :func:`resolve_manifest` decodes the map from the virtual dataset's
    mappings; :mod:`xarray_vhdf5._versions.chunkmaps` reads the one a commit
    stored, with the chunks' addresses.

    Parameters
    ----------
    name : str
        Absolute HDF5 path of the version's virtual dataset.
    raw : h5py.Dataset
        Its raw_data, in a file opened from its path (``sec2`` or ``stdio`` driver).
    shape, chunks : tuple of int
        The dataset's shape and chunk shape, in points.
    dtype : numpy.dtype
        The dataset's dtype.
    fillvalue : numpy.ndarray, 0-d
        The virtual dataset's fill value (what unmapped chunks read as).
    starts : numpy.ndarray of int64, shape ``ceil(shape / chunks)``
        Per chunk its first row of raw_data (points along axis 0), -1 unmapped.
    addresses : callable, optional
        Given the sorted unique mapped ``starts`` (uint64, ``(n,)``), their
        chunks' ``(file offset, size, filter mask)`` (uint64, ``(n, 3)``);
        default: asked of libhdf5 (:func:`chunk_addresses`).
    verify : bool
        As for :func:`resolve_manifest`.
    reasons : list of str, optional
        Reasons already found why the chunks cannot be read without libhdf5.

    Raises
    ------
    xarray_vhdf5.errors.CorruptFileError
        A chunk is mapped past raw_data's end, or (``verify``) has no row in the hash table.
    """
    path = os.path.abspath(raw.file.filename)
    chunks = tuple(int(c) for c in chunks)
    dcpl = raw.id.get_create_plist()
    pipeline = [dcpl.get_filter(i) for i in range(dcpl.get_nfilters())]
    filters = tuple(tuple(f[:3]) for f in pipeline)
    names = tuple(f[3].decode(errors="replace").split(";")[0].strip() or str(f[0]) for f in pipeline)
    reasons = list(reasons or ()) + _unsupported(raw, dcpl, dtype, chunks, filters, names)
    grid = starts.shape
    mapped = np.flatnonzero(starts >= 0)
    flat = starts.reshape(-1)[mapped]
    rows, inverse = _unique_inverse(flat)
    slots = np.full(grid, -1, np.int32)
    slots.reshape(-1)[mapped] = inverse
    if np.any(rows % chunks[0]):
        reasons.append("a mapping starts inside a raw_data chunk")
    for axis, size in enumerate(raw.shape if mapped.size else ()):  # every mapped chunk within raw_data
        extent = np.minimum(chunks[axis], shape[axis] - np.arange(grid[axis]) * chunks[axis])  # points mapped
        if axis and int(extent.max()) <= size:
            continue  # along the other axes a chunk starts at 0 in raw_data
        extent = extent.reshape((1,) * axis + (-1,) + (1,) * (len(grid) - axis - 1))
        end = np.where(starts >= 0, extent + (starts if axis == 0 else 0), 0)
        if int(end.max()) > size:
            j = np.unravel_index(int(np.argmax(end)), grid)
            raise CorruptFileError(
                f"{path}: dataset {name} maps chunk {tuple(int(k) for k in j)} to raw_data up to point "
                f"{int(end[j])} along axis {axis}, past the end of {raw.name} (shape {raw.shape})",
                path=path,
            )
    if addresses is None:
        addr, nbytes, masks = chunk_addresses(raw, rows, chunks[0])
    else:
        found = addresses(rows.astype(np.uint64))
        addr, nbytes, masks = found[:, 0], found[:, 1], found[:, 2].astype(np.uint32)
    if not reasons and raw.file.userblock_size and rows.size and nbytes[0]:
        # chunk addresses count the user block (HDF5 2.0); check one against libhdf5
        with open(path, "rb") as fh:
            fh.seek(int(addr[0]))
            stored = raw.id.read_direct_chunk((int(rows[0]),) + (0,) * (len(chunks) - 1))[1]
            if fh.read(int(nbytes[0])) != stored:
                reasons.append("chunk addresses do not count the file's user block")
    raw_fill = np.zeros((), dtype) if dtype.hasobject else np.asarray(raw.fillvalue, dtype)
    return ChunkManifest(
        path=path,
        name=name,
        raw_data=raw.name,
        shape=shape,
        chunks=chunks,
        dtype=dtype,
        fillvalue=fillvalue,
        raw_fillvalue=raw_fill,
        filters=filters,
        filter_names=names,
        slots=slots,
        rows=rows.astype(np.uint64),
        offsets=addr,
        nbytes=nbytes,
        filter_masks=masks,
        digests=_digests(raw, rows, path, name) if verify else None,
        verify=verify,
        reason="; ".join(reasons) or None,
    )


def _unique_inverse(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``numpy.unique(values, return_inverse=True)`` for 1-d int64, by one stable sort.

    numpy 2's ``unique`` hashes, several times slower on the mostly sorted
    rows of a chunk map than one stable sort.
    """
    if values.size == 0:
        return values.copy(), np.zeros(0, np.intp)
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    first = np.empty(ordered.size, bool)
    first[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    inverse = np.empty(values.size, np.intp)
    inverse[order] = np.cumsum(first) - 1
    return ordered[first], inverse


def _unsupported(raw: h5py.Dataset, dcpl, dtype: np.dtype, chunks: tuple, filters: tuple, names: tuple) -> list[str]:
    """Why raw_data's chunks cannot be read without libhdf5 (empty: they can)."""
    reasons = []
    if raw.file.driver not in ("sec2", "stdio"):
        reasons.append(f"the file is opened with the {raw.file.driver!r} driver, not read from its path")
    if raw.dtype.hasobject and not dtype.hasobject:
        reasons.append(f"raw_data's dtype {raw.dtype} holds variable-length data")
    if raw.chunks != chunks:
        reasons.append(f"raw_data's HDF5 chunks {raw.chunks} are not the dataset's chunks")
    reasons += [
        f"filter {name} (id {f[0]}) has no decoder here"
        for f, name in zip(filters, names)
        if f[0] not in DECODED_FILTERS
    ]
    if dcpl.fill_value_defined() == h5d.FILL_VALUE_UNDEFINED:
        reasons.append("the raw_data has no fill value (libhdf5 leaves unwritten points unset)")
    return reasons


def chunk_addresses(raw: h5py.Dataset, rows: np.ndarray, rows_per_chunk: int) -> tuple[np.ndarray, ...]:
    """``(file offset, size, filter mask)`` of the raw_data chunks starting at ``rows`` (points), from libhdf5.

    One ``H5Dget_chunk_info_by_coord`` per chunk when they are few, else one
    ``H5Dchunk_iter`` over raw_data's chunk index.

    Returns
    -------
    tuple of numpy.ndarray
        Three arrays of shape ``rows.shape``: uint64 offset and size in bytes
        (size 0: the chunk was never allocated), uint32 HDF5 filter mask.
    """
    n = rows.size
    addr, nbytes, masks = np.zeros(n, np.uint64), np.zeros(n, np.uint64), np.zeros(n, np.uint32)
    ndim = len(raw.shape)
    total = -(-raw.shape[0] // rows_per_chunk)
    if int(np.sum(rows // rows_per_chunk + _LOOKUP_START)) < _ITER_COST * total:
        for i, row in enumerate(rows.tolist()):
            info = raw.id.get_chunk_info_by_coord((row,) + (0,) * (ndim - 1))
            if info.byte_offset is not None:
                addr[i], nbytes[i], masks[i] = info.byte_offset, info.size, info.filter_mask
        return addr, nbytes, masks
    where = np.full(total, -1, np.intp)
    where[rows // rows_per_chunk] = np.arange(n)

    def visit(info):
        offset = info.chunk_offset
        if not any(offset[1:]) and offset[0] // rows_per_chunk < total:
            i = where[offset[0] // rows_per_chunk]
            if i >= 0:
                addr[i], nbytes[i], masks[i] = info.byte_offset, info.size, info.filter_mask

    raw.id.chunk_iter(visit)
    return addr, nbytes, masks


def _digests(raw: h5py.Dataset, rows: np.ndarray, path: str, name: str) -> np.ndarray:
    """The hash table's SHA-256 digest of each raw_data chunk starting at ``rows``: uint8, ``(n, 32)``."""
    table = raw.file[hash_table_path(raw).decode()]
    entries = table[: int(table.attrs.get("largest_index", 0))]
    starts = entries["shape"][:, 0]
    order = np.argsort(starts, kind="stable")
    at = np.minimum(np.searchsorted(starts, rows, sorter=order), max(len(order) - 1, 0))
    found = order[at] if len(order) else np.zeros(0, np.intp)
    missing = np.flatnonzero(starts[found] != rows) if len(order) else np.arange(rows.size)
    if missing.size:
        raise CorruptFileError(
            f"{path}: dataset {name} maps raw_data rows {int(rows[missing[0]])}.. which have no entry in "
            f"{table.name}: their chunks cannot be verified",
            path=path,
        )
    return np.ascontiguousarray(entries["hash"][found], dtype=np.uint8)


def _normalize(key: Any, shape: tuple[int, ...]) -> list[tuple[np.ndarray, bool]]:
    """Per axis, the points selected (intp, in output order) and whether the axis is kept."""
    key = key if isinstance(key, tuple) else (key,)
    if sum(k is Ellipsis for k in key) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    at = next((i for i, k in enumerate(key) if k is Ellipsis), None)
    if at is not None:
        key = key[:at] + (slice(None),) * (len(shape) - len(key) + 1) + key[at + 1 :]
    if len(key) > len(shape):
        raise IndexError(f"too many indices: {len(key)} for {len(shape)} dimensions")
    key = key + (slice(None),) * (len(shape) - len(key))
    out, arrays = [], 0
    for axis, (k, n) in enumerate(zip(key, shape)):
        if isinstance(k, slice):
            out.append((np.arange(*k.indices(n), dtype=np.intp), True))
            continue
        arr = np.asarray(k)
        if arr.dtype == bool and arr.ndim == 1:
            if arr.size != n:
                raise IndexError(f"boolean index of length {arr.size} for axis {axis} of length {n}")
            arr = np.flatnonzero(arr)
        if arr.dtype.kind not in "iu" or arr.ndim > 1:
            raise IndexError(f"axis {axis}: only integers, slices, '...' and 1-d integer arrays are valid, got {k!r}")
        if arr.ndim == 1:
            arrays += 1
        if arrays > 1:
            raise IndexError("at most one axis may be indexed by an array (outer indexing, one vector)")
        if arr.size and (arr.min() < -n or arr.max() >= n):
            raise IndexError(f"index out of bounds for axis {axis} of size {n}")
        out.append((np.where(arr < 0, arr + n, arr).astype(np.intp).reshape(-1), arr.ndim == 1))
    return out


def _as_slice(idx: np.ndarray) -> slice | np.ndarray:
    """``idx`` as an equivalent slice when it is an arithmetic progression of nonzero step, else itself."""
    if idx.size == 1:
        return slice(int(idx[0]), int(idx[0]) + 1)
    step = int(idx[1] - idx[0])
    if step == 0 or np.any(np.diff(idx) != step):
        return idx
    stop = int(idx[-1]) + step
    return slice(int(idx[0]), stop if stop >= 0 else None, step)


def _axis_groups(idx: np.ndarray, chunk: int) -> list[tuple[int, Any, Any]]:
    """``(chunk number, output positions, points within the chunk)`` per chunk the points touch."""
    number = idx // chunk
    order = np.argsort(number, kind="stable")
    cuts = np.flatnonzero(np.diff(number[order])) + 1
    groups = []
    for pos in np.split(order, cuts) if idx.size else []:
        k = int(number[pos[0]])
        groups.append((k, _as_slice(pos), _as_slice(idx[pos] - k * chunk)))
    return groups


class ChunkManifest:
    """Where every chunk of one version's dataset lies in its file, as immutable byte ranges.

    Made by :func:`resolve_manifest`; not meant to be constructed directly.
    Holds no HDF5 object and no open file while pickled: the file descriptor
    :meth:`read` needs is opened lazily from ``path`` (again after unpickling
    or in a forked process).

    Attributes
    ----------
    path : str
        Absolute path of the HDF5 file.
    name, raw_data : str
        Absolute HDF5 paths of the virtual dataset and of its raw_data.
    shape, chunks : tuple of int
        The dataset's shape and chunk shape, in points.
    dtype : numpy.dtype
        The dataset's dtype.
    fillvalue, raw_fillvalue : numpy.ndarray, 0-d
        What unmapped chunks read as (the virtual dataset's fill value) and
        what mapped but unallocated raw_data chunks read as (raw_data's), as
        libhdf5 reads them.
    filters : tuple of (int, int, tuple)
        raw_data's filter pipeline in HDF5 order: ``(filter id, flags, cd_values)``.
    slots : numpy.ndarray of int32, shape ``ceil(shape / chunks)``
        Per virtual chunk, its stored chunk (index into the arrays below), -1 unmapped.
    rows, offsets, nbytes : numpy.ndarray of uint64, shape ``(n,)``
        Per stored chunk: its first row of raw_data (points), its file offset
        and its stored size (bytes; 0: never allocated, reads as ``raw_fillvalue``).
    filter_masks : numpy.ndarray of uint32, shape ``(n,)``
        Per stored chunk, HDF5's filter mask (bit ``i``: filter ``i`` skipped).
    digests : numpy.ndarray of uint8, shape ``(n, 32)``, or None
        Per stored chunk, its SHA-256 digest from the hash table (``verify``).
    supported : bool
        Whether :meth:`read` can decode the chunks; ``reason`` says why not.
    """

    def __init__(
        self,
        *,
        path,
        name,
        raw_data,
        shape,
        chunks,
        dtype,
        fillvalue,
        raw_fillvalue,
        filters,
        filter_names,
        slots,
        rows,
        offsets,
        nbytes,
        filter_masks,
        digests,
        verify,
        reason,
    ):
        self.path, self.name, self.raw_data = path, name, raw_data
        self.shape, self.chunks, self.dtype = tuple(shape), tuple(chunks), np.dtype(dtype)
        self.fillvalue, self.raw_fillvalue = fillvalue, raw_fillvalue
        self.filters, self.filter_names = filters, filter_names
        self.slots, self.rows, self.offsets, self.nbytes = slots, rows, offsets, nbytes
        self.filter_masks, self.digests, self.verify, self.reason = filter_masks, digests, verify, reason
        self._fd, self._pid, self._lock = None, None, threading.Lock()

    supported = property(lambda self: self.reason is None, doc="Whether :meth:`read` can decode the chunks.")
    ndim = property(lambda self: len(self.shape), doc="Number of axes.")

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("_fd", "_pid", "_lock")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._fd, self._pid, self._lock = None, None, threading.Lock()

    def _descriptor(self) -> int:
        with self._lock:
            if self._fd is None or self._pid != os.getpid():
                if self._fd is not None:  # inherited through fork: the child's own copy
                    os.close(self._fd)
                self._fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
                self._pid = os.getpid()
            return self._fd

    def close(self) -> None:
        """Close the file descriptor, if open (a later :meth:`read` reopens it)."""
        with self._lock:
            if self._fd is not None and self._pid == os.getpid():
                os.close(self._fd)
            self._fd = None

    def __del__(self):
        if getattr(self, "_lock", None) is not None:
            try:
                self.close()
            except OSError:  # already closed by someone else; nothing left to release
                pass

    def __repr__(self) -> str:
        filters = "+".join(self.filter_names) or "none"
        status = "supported" if self.supported else f"unsupported: {self.reason}"
        mapped = int(np.count_nonzero(self.slots >= 0))
        return (
            f"<ChunkManifest {self.name} in {self.path}: shape {self.shape} {self.dtype}, "
            f"chunks {self.chunks}, {mapped} of {self.slots.size} chunks mapped ({self.rows.size} "
            f"stored, {int(self.nbytes.sum())} bytes on disk), filters {filters}, {status}>"
        )

    def __getitem__(self, key: Any) -> np.ndarray:
        """``self.read(key)``, so a manifest can back ``dask.array.from_array``."""
        return self.read(key)

    def _fail(self, slot: int, where: tuple, what: str) -> CorruptFileError:
        row, off, n = int(self.rows[slot]), int(self.offsets[slot]), int(self.nbytes[slot])
        return CorruptFileError(
            f"{self.path}: dataset {self.name}, chunk {where} (raw_data {self.raw_data} rows "
            f"{row}:{row + self.chunks[0]}, bytes {off}:{off + n} of the file): {what}",
            path=self.path,
        )

    def _chunk(self, slot: int, where: tuple) -> np.ndarray:
        """Stored chunk ``slot`` (mapped at virtual chunk ``where``), decoded, of shape ``chunks``."""
        n = int(self.nbytes[slot])
        if n == 0:
            return np.broadcast_to(self.raw_fillvalue, self.chunks)
        data = os.pread(self._descriptor(), n, int(self.offsets[slot]))
        if len(data) < n:
            raise self._fail(slot, where, f"the file ends {len(data)} bytes into the chunk (truncated)")
        size = self.dtype.itemsize * int(np.prod(self.chunks))
        sizes = [size]  # sizes[i]: bytes out of decoding filter i (into filter i at write time)
        for i, (fid, _, _) in enumerate(self.filters[:-1]):
            applied = not (int(self.filter_masks[slot]) >> i) & 1
            sizes.append(sizes[-1] + (4 if applied and fid == h5py.h5z.FILTER_FLETCHER32 else 0))
        view = memoryview(data)
        for i in reversed(range(len(self.filters))):
            if (int(self.filter_masks[slot]) >> i) & 1:
                continue
            fid, _, cd = self.filters[i]
            try:
                view = memoryview(DECODED_FILTERS[fid](view, cd, sizes[i])).cast("B")
            except Exception as exc:  # every codec library raises its own class
                raise self._fail(slot, where, f"filter {self.filter_names[i]} failed: {exc}") from exc
        if view.nbytes != size:
            raise self._fail(slot, where, f"decoded to {view.nbytes} bytes, expected {size}")
        return np.frombuffer(view, self.dtype).reshape(self.chunks)

    def _slot(self, index: tuple[int, ...]) -> int:
        index = tuple(int(i) for i in index)
        if len(index) != len(self.shape) or not all(0 <= i < n for i, n in zip(index, self.slots.shape)):
            raise IndexError(f"chunk {index} is outside the chunk grid {self.slots.shape} of {self.name}")
        return int(self.slots[index])

    def stored_chunk(self, index: tuple[int, ...]) -> tuple[bytes, int] | None:
        """The bytes of the stored chunk mapped at chunk ``index``, as the file holds them.

        Parameters
        ----------
        index : tuple of int
            The chunk's position in the chunk grid (``ceil(shape / chunks)``).

        Returns
        -------
        (bytes, int) or None
            The chunk's bytes, encoded by raw_data's filter pipeline
            (:attr:`filters`) except the filters whose bit is set in the
            returned filter mask, and that mask; ``b""`` for a chunk never
            allocated (it reads as :attr:`raw_fillvalue`); None for an
            unmapped chunk (it reads as :attr:`fillvalue`). Not checked
            against the hash table's digest (see :meth:`decoded_chunk`).

        Raises
        ------
        IndexError
            ``index`` is outside the chunk grid.
        xarray_vhdf5.errors.CorruptFileError
            The file ends inside the chunk.
        """
        slot = self._slot(index)
        if slot < 0:
            return None
        n = int(self.nbytes[slot])
        if n == 0:
            return b"", 0
        data = os.pread(self._descriptor(), n, int(self.offsets[slot]))
        if len(data) < n:
            raise self._fail(slot, tuple(index), f"the file ends {len(data)} bytes into the chunk (truncated)")
        return data, int(self.filter_masks[slot])

    def decoded_chunk(self, index: tuple[int, ...]) -> np.ndarray:
        """The points of chunk ``index``, decoded, of shape :attr:`chunks` (edge chunks padded as stored).

        Checked against the hash table's digest when the manifest verifies
        (:attr:`verify`). Raises as :meth:`stored_chunk`, and
        :class:`~xarray_vhdf5.errors.UnsupportedError` when :attr:`supported` is False.
        """
        if not self.supported:
            raise UnsupportedError(f"{self.name} in {self.path} cannot be read without libhdf5: {self.reason}")
        slot = self._slot(index)
        if slot < 0:
            return np.broadcast_to(np.asarray(self.fillvalue, self.dtype), self.chunks)
        if self.verify:
            return self._decode_batch([tuple((k, None, None) for k in index)], [slot], True, None)[slot]
        return self._chunk(slot, tuple(index))

    def read(self, key: Any = (), verify: bool | None = None, threads: int | None = None) -> np.ndarray:
        """Read the points ``key`` selects, decoding only the chunks it touches.

        Parameters
        ----------
        key : tuple
            Per axis an int (the axis is dropped), a slice of any step, or a
            1-d integer (or boolean) array; at most one array (xarray's
            ``OUTER_1VECTOR``: each axis indexed on its own, as h5py does);
            ``...`` stands for the axes not given, missing trailing axes are
            whole. Negative ints count from the end.
        verify : bool, optional
            Re-hash every chunk read (:func:`~xarray_vhdf5._backend.hashing.chunk_hash`
            of the chunk trimmed to the dataset's shape, the format's rule) and
            compare with the hash table's digest. Default: ``self.verify``.
        threads : int, optional
            Threads decoding chunks in parallel (a pool shared by all
            manifests): default as many as the machine has cores (at most 8)
            when the selection touches 4 stored chunks or more and raw_data
            has filters (unfiltered chunks are only read and copied); 0 or 1:
            this thread only. Decoded chunks are held 64 at a time.

        Returns
        -------
        numpy.ndarray
            Of ``dtype``, a new array; one axis per entry of ``key`` that is
            not an int, as long as its selection (possibly 0); 0-d when every
            axis is an int (h5py returns a numpy scalar there).

        Raises
        ------
        IndexError
            An index out of bounds, more than one array, or an unsupported kind of index.
        ValueError
            ``verify`` without digests (resolved with ``verify=False``).
        xarray_vhdf5.errors.UnsupportedError
            ``supported`` is False: read through h5py instead.
        xarray_vhdf5.errors.CorruptFileError
            A chunk past the end of the file, failing to decode (including a
            Fletcher-32 mismatch), of the wrong size, or (``verify``) whose
            digest differs from the hash table's.
        OSError
            The file cannot be opened or read.
        """
        if not self.supported:
            raise UnsupportedError(
                f"{self.name} in {self.path} cannot be read without libhdf5 (read it through h5py): {self.reason}"
            )
        verify = self.verify if verify is None else verify
        if verify and self.digests is None:
            raise ValueError("verify needs the hash table's digests: resolve the manifest with verify=True")
        point = self._point(key)
        if point is not None and not verify:  # one point: its chunk, no selection machinery
            slot = int(self.slots[tuple(i // c for i, c in zip(point, self.chunks))])
            if slot < 0:
                return np.array(self.fillvalue, self.dtype)
            where = tuple(i // c for i, c in zip(point, self.chunks))
            return np.array(self._chunk(slot, where)[tuple(i % c for i, c in zip(point, self.chunks))])
        axes = _normalize(key, self.shape)
        final = tuple(idx.size for idx, kept in axes if kept)
        out = np.empty(tuple(idx.size for idx, _ in axes), self.dtype)
        if out.size == 0:
            return out.reshape(final)
        groups = [_axis_groups(idx, c) for (idx, _), c in zip(axes, self.chunks)]
        touched = list(itertools.product(*groups))
        slots = [int(self.slots[tuple(k for k, _, _ in parts)]) for parts in touched]
        # Unfiltered chunks are a pread and a copy, bound by memory: threads only add contention.
        pool = _pool(threads, len(set(slots) - {-1})) if self.filters or threads else None
        for start in range(0, len(touched), _BATCH):
            batch = range(start, min(start + _BATCH, len(touched)))
            decoded = self._decode_batch([touched[i] for i in batch], [slots[i] for i in batch], verify, pool)
            for i in batch:
                parts, slot = touched[i], slots[i]
                target = tuple(o for _, o, _ in parts)
                if slot < 0:
                    out[target] = self.fillvalue
                else:
                    out[target] = decoded[slot][tuple(i for _, _, i in parts)]
        return out.reshape(final)

    def _point(self, key: Any) -> tuple[int, ...] | None:
        """The point ``key`` names when it is one int per axis (negatives counted from the end), else None."""
        key = key if isinstance(key, tuple) else (key,)
        if len(key) != len(self.shape) or not all(
            isinstance(k, (int, np.integer)) and not isinstance(k, bool) for k in key
        ):
            return None
        point = tuple(int(k) + n if k < 0 else int(k) for k, n in zip(key, self.shape))
        return point if all(0 <= i < n for i, n in zip(point, self.shape)) else None

    def _decode_batch(self, touched: list, slots: list[int], verify: bool, pool) -> dict[int, np.ndarray]:
        """Each stored chunk of ``slots`` decoded (and, ``verify``, checked) once, by ``pool``'s threads if any."""
        first: dict[int, tuple] = {}
        extents: dict[int, set] = {}
        for parts, slot in zip(touched, slots):
            if slot >= 0:
                where = tuple(k for k, _, _ in parts)
                first.setdefault(slot, where)
                extents.setdefault(slot, set()).add(
                    tuple(min(c, n - k * c) for k, c, n in zip(where, self.chunks, self.shape))
                )

        def decode(slot: int) -> np.ndarray:
            where = first[slot]
            data = self._chunk(slot, where)
            for extent in extents[slot] if verify else ():  # the format hashes chunks trimmed to the dataset
                trimmed = np.ascontiguousarray(data[tuple(map(slice, extent))])
                if chunk_hash(trimmed) != self.digests[slot].tobytes():
                    raise self._fail(slot, where, "its SHA-256 differs from the hash table's digest")
            return data

        if pool is None or len(first) < 2:
            return {slot: decode(slot) for slot in first}
        return dict(zip(first, pool.map(decode, first)))


#: Chunks decoded at once by a threaded read (bounds the memory of decoded chunks held).
_BATCH = 64
_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _forget_pool_in_child() -> None:
    """A forked child has none of the pool's threads: it makes its own pool (and lock)."""
    global _POOL, _POOL_LOCK
    _POOL, _POOL_LOCK = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_pool_in_child)


def _pool(threads: int | None, chunks: int) -> ThreadPoolExecutor | None:
    """The shared thread pool when a read of ``chunks`` stored chunks should use threads, else None.

    ``threads`` None: as many as the machine has cores (at most 8) once a read
    touches 4 chunks or more; 0 or 1: none. zlib (through imagecodecs and
    numcodecs) and ``os.pread`` release the GIL, so chunks decode in parallel.
    """
    n = min(os.cpu_count() or 1, 8) if threads is None else int(threads)
    if n <= 1 or chunks < (4 if threads is None else 2):
        return None
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL._max_workers < n:
            _POOL = ThreadPoolExecutor(max_workers=n, thread_name_prefix="vhdf5-decode")
        return _POOL
