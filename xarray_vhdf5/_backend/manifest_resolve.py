"""Resolving a committed version's dataset into a :class:`~xarray_vhdf5._backend.manifest.ChunkManifest`.

:func:`resolve_manifest` is the one libhdf5 step of reading through a manifest:
the mappings, through
:func:`~xarray_vhdf5._backend.chunkmap.build_slab_indices_and_offsets`; the
chunks' addresses, through ``H5Dchunk_iter`` (every chunk of raw_data) or, when
the version maps few of them, ``H5Dget_chunk_info_by_coord`` per chunk
(:func:`chunk_addresses`); raw_data's filter pipeline (``H5Pget_filter2``),
dtype, chunks and fill value. A dataset whose chunks cannot be decoded without
libhdf5 (variable-length strings, which point into HDF5's global heap; a filter
without a decoder in :data:`~xarray_vhdf5._backend.decoders.DECODED_FILTERS`)
gets a manifest with ``supported`` False and the reason: read it through h5py.
:func:`manifest_from_starts` builds one from mappings already decoded.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import h5py
import numpy as np
from h5py import h5d

from ..errors import CorruptFileError
from .chunkmap import mapped_starts, version_dataset_layout
from .chunks import chunk_grid_shape
from .decoders import DECODED_FILTERS
from .hashtable import hash_table_path
from .manifest import ChunkManifest

__all__ = ["chunk_addresses", "manifest_from_starts", "resolve_manifest"]


# Finding chunk addresses, in units of one chunk of raw_data walked (HDF5 2.0 through h5py):
# H5Dget_chunk_info_by_coord walks the chunk index up to the chunk asked for, costing
# _LOOKUP_START plus its position; H5Dchunk_iter visits every chunk of raw_data (every
# version's) at _ITER_COST each.
_LOOKUP_START, _ITER_COST = 90, 58


def resolve_manifest(
    vds: h5py.Dataset,
    *,
    verify: bool = False,
    addresses=None,
    layout: tuple[tuple[int, ...], h5py.Dataset | None] | None = None,
) -> ChunkManifest:
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
    layout : (tuple of int, h5py.Dataset or None), optional
        ``vds``'s chunk shape and its raw_data (None: missing), when the
        caller has read them (:func:`~xarray_vhdf5._backend.chunkmap.version_dataset_layout`).

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
    if layout is not None:
        chunks, raw = layout
    else:
        chunks, raw_path = version_dataset_layout(vds)
        raw = vds.file.get(raw_path)
    if not isinstance(raw, h5py.Dataset):
        path = os.path.abspath(vds.file.filename)
        raw_path = version_dataset_layout(vds)[1]
        raise CorruptFileError(f"{path}: dataset {vds.name} names raw_data {raw_path}, which is missing", path=path)
    shape, dtype = vds.shape, vds.dtype
    grid = chunk_grid_shape(shape, chunks)
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
        starts = mapped_starts(vds, shape, chunks, raw)
    except ValueError as exc:  # mappings libhdf5 reads but raw_data's chunks cannot express
        reasons.append(str(exc))
        starts = np.full(grid, -1, np.int64)
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
    path: str | None = None,
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
    path : str, optional
        Read the chunks from this file, which holds them byte for byte as
        raw_data's file does, at the offsets ``addresses`` gives (which must
        then be given): the side copy of an in-place rewrite
        (:mod:`xarray_vhdf5._versions.sidecopy`). Default: raw_data's file.

    Raises
    ------
    xarray_vhdf5.errors.CorruptFileError
        A chunk is mapped past raw_data's end, or (``verify``) has no row in the hash table.
    """
    if path is not None and addresses is None:
        raise ValueError("a manifest over another file needs the chunks' addresses in it")
    elsewhere = path is not None
    h5file = raw.file  # one File object for its name, driver and user block
    path = os.path.abspath(h5file.filename if path is None else path)
    chunks = tuple(int(c) for c in chunks)
    dcpl = raw.id.get_create_plist()
    pipeline = [dcpl.get_filter(i) for i in range(dcpl.get_nfilters())]
    filters = tuple(tuple(f[:3]) for f in pipeline)
    names = tuple(f[3].decode(errors="replace").split(";")[0].strip() or str(f[0]) for f in pipeline)
    reasons = list(reasons or ()) + _unsupported(raw, h5file.driver, dcpl, dtype, chunks, filters, names, elsewhere)
    grid = starts.shape
    mapped = np.flatnonzero(starts >= 0)
    flat = starts.reshape(-1)[mapped]
    rows, inverse = _unique_inverse(flat, chunks[0])
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
    if not reasons and not elsewhere and h5file.userblock_size and rows.size and nbytes[0]:
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


def _unique_inverse(values: np.ndarray, step: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """``numpy.unique(values, return_inverse=True)`` for 1-d int64, without hashing.

    numpy 2's ``unique`` hashes, several times slower on a chunk map than
    this. Values spread over a range of at most about four times their
    number (counted in ``step``, a chunk's rows, when every value is the
    smallest plus a multiple of it: a map's first rows) are ranked by
    counting, in one pass; others by one stable sort.
    """
    if values.size == 0:
        return values.copy(), np.zeros(0, np.intp)
    if values.size == 1 or bool(np.all(values[1:] > values[:-1])):  # already unique and sorted
        return values.copy(), np.arange(values.size, dtype=np.intp)
    low = int(values.min())
    offsets = values - low
    if step > 1 and not np.any(offsets % step):
        offsets //= step
    else:
        step = 1
    span = int(offsets.max()) + 1
    if span <= 4 * values.size + 4096:  # rank by presence: O(values + span), no sort
        present = np.zeros(span, bool)
        present[offsets] = True
        rank = np.cumsum(present, dtype=np.intp) - 1
        return (np.flatnonzero(present) * step + low).astype(values.dtype), rank[offsets]
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    first = np.empty(ordered.size, bool)
    first[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    inverse = np.empty(values.size, np.intp)
    inverse[order] = np.cumsum(first) - 1
    return ordered[first], inverse


def _unsupported(
    raw: h5py.Dataset,
    driver: str,
    dcpl,
    dtype: np.dtype,
    chunks: tuple,
    filters: tuple,
    names: tuple,
    elsewhere: bool = False,
) -> list[str]:
    """Why raw_data's chunks cannot be read without libhdf5 (empty: they can); ``elsewhere``: from a copy.

    ``driver``: the HDF5 file driver of raw_data's file, as h5py names it.
    """
    reasons = []
    if not elsewhere and driver not in ("sec2", "stdio"):
        reasons.append(f"the file is opened with the {driver!r} driver, not read from its path")
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
