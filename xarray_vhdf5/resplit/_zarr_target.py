"""Whole output chunks into a Zarr array as encoded bytes, put into its store by key.

zarr-python 3 spends a few milliseconds of Python per ``array[region] = data``
(indexing, the event loop's round trip, the codec pipeline's batching): more
than encoding a chunk of a few hundred kB. When the resplit hands out whole
output chunks of a Zarr array, :class:`ZarrChunkWriter` does what zarr does for
a complete chunk, without the machinery around it:

1. pad an edge chunk to the full chunk shape with the fill value (zarr writes
   edge chunks whole, padded so);
2. skip a chunk whose points all equal the fill value, deleting its key, unless
   the array's ``config.write_empty_chunks`` is True (zarr's test:
   ``NDBuffer.all_equal``, which compares a zero fill by bit pattern and lets
   NaN equal NaN);
3. encode with the array's own codec objects: for Zarr format 3 the codecs of
   the array metadata in order (``_encode_sync`` of zarr's ``SupportsSyncCodec``
   protocol, the chunk spec carried through each codec's ``resolve_metadata``),
   for format 2 the numcodecs filters then the compressor, on the chunk in C
   order (as zarr's ``V2Codec``);
4. ``store.set_sync(key, bytes)`` with the key from the metadata's chunk key
   encoding (``"c/0/1/2"``, ``"0.1.2"``...), under the array's path.

The bytes stored are those ``array[...] = data`` stores into a new array,
byte for byte (``tests/test_zarr_fast_write.py`` compares the two stores key by
key); gzip chunks differ only in the header's time stamp, which numcodecs sets
to the current second for zarr's own writes too.
:meth:`ZarrChunkWriter.of` returns None, so that the caller keeps using
``array[region] = data``, for what this does not cover: sharded arrays, a chunk
grid other than the plan's output chunks, a non-default codec pipeline, a codec
without a synchronous encoder, Zarr 2 arrays in Fortran order, non-numeric
dtypes, stores without synchronous set and delete.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["ZarrChunkWriter"]

_DEFAULT_PIPELINE = "zarr.core.codec_pipeline.BatchedCodecPipeline"


class ZarrChunkWriter:
    """Encodes whole chunks of one Zarr array with its codecs and puts them into its store.

    Build one with :meth:`of`. :meth:`prepare` runs in the thread handing out the
    chunks (it copies the points, which the resplit's buffer will overwrite);
    :meth:`write` may run in any thread, several at once on different chunks.
    """

    def __init__(self, array: Any) -> None:
        from zarr.buffer import default_buffer_prototype

        meta = array.metadata
        self.zarr_format = int(meta.zarr_format)
        self.store = array.store_path.store
        path = array.store_path.path
        self.prefix = f"{path}/" if path else ""
        self.metadata = meta
        self.chunk_shape = tuple(int(c) for c in array.chunks)
        self.dtype = np.dtype(array.dtype)
        self.prototype = default_buffer_prototype()
        self.spec = meta.get_chunk_spec((0,) * len(self.chunk_shape), array.config, self.prototype)
        # zarr's fill_value_or_default: Zarr 2 metadata may hold a null fill value.
        fill = self.spec.fill_value
        self.fill = self.spec.dtype.default_scalar() if fill is None else fill
        self.write_empty = bool(array.config.write_empty_chunks)

    @classmethod
    def of(cls, array: Any, chunk_shape: tuple[int, ...]) -> ZarrChunkWriter | None:
        """A writer for ``array`` if it is a Zarr array this module can write whole chunks of, else None.

        Parameters
        ----------
        array : object
            The resplit's target.
        chunk_shape : tuple of int
            The plan's (regular) output chunk shape, in points: must be the array's chunks.

        Returns
        -------
        ZarrChunkWriter or None
        """
        if not type(array).__module__.startswith("zarr."):
            return None
        import zarr
        from zarr.abc.codec import SupportsSyncCodec
        from zarr.abc.store import SupportsDeleteSync, SupportsSetSync

        if not isinstance(array, zarr.Array) or array.shards is not None:
            return None
        if tuple(int(c) for c in array.chunks) != tuple(chunk_shape) or np.dtype(array.dtype).kind not in "biufc":
            return None
        if zarr.config.get("codec_pipeline.path") != _DEFAULT_PIPELINE:
            return None
        store = array.store_path.store
        if not (isinstance(store, SupportsSetSync) and isinstance(store, SupportsDeleteSync)) or store.read_only:
            return None
        meta = array.metadata
        if meta.zarr_format == 3:
            if not all(isinstance(c, SupportsSyncCodec) for c in meta.codecs):
                return None
        elif array.order != "C":
            return None
        return cls(array)

    def key(self, chunk: tuple[int, ...]) -> str:
        """The store key of output chunk ``chunk`` (its index in the chunk grid)."""
        return self.prefix + self.metadata.encode_chunk_key(tuple(int(i) for i in chunk))

    def prepare(self, data: np.ndarray) -> np.ndarray:
        """A C-contiguous copy of a chunk's points at the full chunk shape, padded with the fill value."""
        if data.shape == self.chunk_shape:
            return np.array(data, dtype=self.dtype, order="C")
        full = np.full(self.chunk_shape, self.fill, dtype=self.dtype)
        full[tuple(slice(0, s) for s in data.shape)] = data
        return full

    def encode(self, chunk: np.ndarray) -> Any:
        """The bytes zarr stores for ``chunk`` (full chunk shape), or None if zarr would store none.

        Returns
        -------
        zarr Buffer or None
            None: the points all equal the fill value and empty chunks are not written.
        """
        nd = self.prototype.nd_buffer.from_numpy_array(chunk)
        if not self.write_empty and self._all_fill(chunk, nd):
            return None
        if self.zarr_format == 3:
            value: Any = nd
            spec = self.spec
            for codec in self.metadata.codecs:
                value = codec._encode_sync(value, spec)
                spec = codec.resolve_metadata(spec)
            return value
        from numcodecs.compat import ensure_bytes, ensure_contiguous_ndarray

        out: Any = chunk.astype(self.spec.dtype.to_native_dtype(), order="C", copy=False)
        for f in self.metadata.filters or ():
            out = f.encode(out)
        if self.metadata.compressor is not None:
            return self.prototype.buffer.from_bytes(ensure_bytes(self.metadata.compressor.encode(out)))
        # No compressor: zarr stores the (filtered) array's bytes; skip its copy into a bytes object.
        flat = ensure_contiguous_ndarray(out).reshape(-1).view("B")
        return self.prototype.buffer.from_array_like(flat)

    def _all_fill(self, chunk: np.ndarray, nd: Any) -> bool:
        """zarr's empty-chunk test, ``nd.all_equal(fill)``, asked of the first point first.

        ``all_equal`` compares point by point (a zero fill by bit pattern, NaN
        equal to NaN), and over a whole chunk it costs about as much as storing
        it; a chunk whose first point differs is not empty, which one point says.
        """
        first = self.prototype.nd_buffer.from_numpy_array(chunk.reshape(-1)[:1])
        return bool(first.all_equal(self.fill)) and bool(nd.all_equal(self.fill))

    def write(self, chunk: tuple[int, ...], data: np.ndarray) -> int:
        """Encode ``data`` (from :meth:`prepare`) and set it at ``chunk``'s key, or delete the key.

        Returns
        -------
        int
            Bytes stored (0 for an empty chunk not written).
        """
        key = self.key(chunk)
        encoded = self.encode(data)
        if encoded is None:
            self.store.delete_sync(key)
            return 0
        self.store.set_sync(key, encoded)
        return len(encoded)
