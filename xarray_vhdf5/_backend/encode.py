"""Encoding chunks with raw_data's HDF5 filter pipeline outside libhdf5, several at a time.

libhdf5 runs one call at a time, so chunks written through it are compressed
one after the other. :class:`ChunkEncoder` applies the same pipeline in Python
(HDF5 User Guide, "HDF5 Datasets", filters; the decoders of
:mod:`~xarray_vhdf5._backend.manifest` undo it), with codecs that release the
GIL, so that :class:`~xarray_vhdf5._backend.raw_data.ChunkWriter` encodes queued
chunks in a thread pool and stores each with ``H5Dwrite_chunk``
(``write_direct_chunk``, filter mask 0: every filter applied):

- shuffle (2): HDF5's byte shuffle, ``numcodecs.Shuffle(itemsize)``;
- deflate (1): a zlib stream (RFC 1950) at the pipeline's level, as
  ``H5Z_filter_deflate`` writes it (``compress2``), here by libdeflate
  (``imagecodecs.deflate_encode``); the bytes may differ from zlib's, the points
  they decode to do not;
- fletcher32 (3): HDF5's Fletcher-32 of the bytes so far, appended
  little-endian (``imagecodecs.h5checksum_fletcher32``, as ``H5Z_filter_fletcher32``).

Any other filter (LZF, Blosc, Zstandard, szip, scale-offset, n-bit) or a dtype
holding objects: no encoder; the chunks go through libhdf5 as before.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import h5py
import imagecodecs
import numcodecs
import numpy as np

__all__ = ["ChunkEncoder", "encoder_pool"]

_DEFLATE, _SHUFFLE, _FLETCHER32 = h5py.h5z.FILTER_DEFLATE, h5py.h5z.FILTER_SHUFFLE, h5py.h5z.FILTER_FLETCHER32
_SUPPORTED = {_DEFLATE, _SHUFFLE, _FLETCHER32}
#: Unfiltered chunks at least this large (bytes) are written whole, as stored (``write_direct_chunk``):
#: no slab is assembled and libhdf5 neither converts nor caches them. Smaller ones go in slabs,
#: one ``H5Dwrite`` for many, cheaper than a call per chunk.
DIRECT_MIN_BYTES = 64 * 1024
_POOL: ThreadPoolExecutor | None = None
_POOL_PID: int | None = None


def encoder_pool() -> ThreadPoolExecutor:
    """The process's pool of encoding threads (as many as CPUs, at most 4; made anew after a fork)."""
    global _POOL, _POOL_PID
    if _POOL is None or _POOL_PID != os.getpid():
        _POOL = ThreadPoolExecutor(min(4, os.cpu_count() or 1), thread_name_prefix="vhdf5-encode")
        _POOL_PID = os.getpid()
    return _POOL


class ChunkEncoder:
    """raw_data's filter pipeline, applied to whole chunks; see the module docs.

    Made by :meth:`of`, which returns None when the pipeline cannot be applied here.

    Attributes
    ----------
    filters : tuple of (int, tuple)
        ``(filter id, cd_values)`` in pipeline (encoding) order.
    dtype : numpy.dtype
        The dataset's dtype.
    chunks : tuple of int
        Its chunk shape, points.
    fillvalue : numpy.ndarray, 0-d
        What pads an edge chunk (the dataset's fill value, as libhdf5 pads it).
    """

    def __init__(self, filters: tuple[tuple[int, tuple], ...], dtype: np.dtype, chunks: tuple[int, ...], fillvalue):
        self.filters = filters
        self.dtype = np.dtype(dtype)
        self.chunks = tuple(chunks)
        self.fillvalue = np.asarray(0 if fillvalue is None else fillvalue, dtype=self.dtype)

    @classmethod
    def of(cls, raw_data: h5py.Dataset) -> ChunkEncoder | None:
        """The encoder of ``raw_data``'s pipeline, or None (a filter not encoded here, or no filter and
        chunks smaller than :data:`DIRECT_MIN_BYTES`)."""
        dtype = raw_data.dtype
        if dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None or raw_data.chunks is None:
            return None
        dcpl = raw_data.id.get_create_plist()
        filters = []
        for i in range(dcpl.get_nfilters()):
            fid, _flags, cd, _name = dcpl.get_filter(i)
            if fid not in _SUPPORTED:
                return None
            filters.append((int(fid), tuple(int(c) for c in cd)))
        if not filters and math.prod(raw_data.chunks) * dtype.itemsize < DIRECT_MIN_BYTES:
            return None
        return cls(tuple(filters), dtype, tuple(raw_data.chunks), raw_data.fillvalue)

    def encode(self, chunk: np.ndarray) -> bytes | np.ndarray:
        """The stored bytes of one chunk, every filter applied (none: the chunk's bytes, not copied if contiguous).

        Parameters
        ----------
        chunk : numpy.ndarray
            The chunk's points, raw_data's dtype, shape :attr:`chunks` or, for an
            edge chunk, trimmed (each side at most the chunk's): it is then padded
            with :attr:`fillvalue`, as libhdf5 fills a chunk it allocates.

        Returns
        -------
        bytes or numpy.ndarray
            What ``write_direct_chunk`` stores with filter mask 0: bytes, or,
            with no filter, the chunk's bytes as a 1-d ``uint8`` array.

        Raises
        ------
        ValueError
            ``chunk`` has another dtype, another number of axes, or a side larger than the chunk's.
        """
        if (
            chunk.dtype != self.dtype
            or chunk.ndim != len(self.chunks)
            or any(n > c for n, c in zip(chunk.shape, self.chunks, strict=True))
        ):
            raise ValueError(
                f"a chunk of at most {self.chunks} points of {self.dtype} was expected, "
                f"got shape {chunk.shape} and dtype {chunk.dtype}"
            )
        if chunk.shape != self.chunks:
            whole = np.full(self.chunks, self.fillvalue, dtype=self.dtype)
            whole[tuple(slice(0, n) for n in chunk.shape)] = chunk
            chunk = whole
        data: Any = np.ascontiguousarray(chunk).view(np.uint8).reshape(-1)
        if not self.filters:
            return data
        for fid, cd in self.filters:
            if fid == _SHUFFLE:
                data = numcodecs.Shuffle(cd[0] if cd else self.dtype.itemsize).encode(data)
            elif fid == _DEFLATE:
                data = imagecodecs.deflate_encode(data, level=cd[0] if cd else 4)
            else:  # fletcher32
                raw = bytes(data)
                data = raw + int(imagecodecs.h5checksum_fletcher32(raw)).to_bytes(4, "little")
        return bytes(data)
