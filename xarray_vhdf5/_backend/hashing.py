"""SHA-256 hashing of chunks, identical to versioned-hdf5's data_version 4.

Two libraries writing the same file must compute the same digest for the same
chunk, or deduplication across them silently stops. The rule (``docs/format.md``,
"Chunk hash"):

- numeric and fixed-size data: SHA-256 over the C-contiguous bytes of the
  edge-trimmed chunk, then over ``str(chunk.shape).encode("ascii")``;
- object (variable-length string) data and numpy ``StringDType``: per element
  in C order the 8-byte little-endian length then the bytes (``str`` encoded as
  UTF-8), then the shape string as above.
"""

from __future__ import annotations

import hashlib
import struct

import numpy as np

__all__ = ["chunk_hash", "is_vlen_string_dtype"]

_LENGTH = struct.Struct("<Q")


def is_vlen_string_dtype(dtype: np.dtype) -> bool:
    """Return True for variable-length string dtypes (h5py object strings, StringDType)."""
    if dtype.kind == "T":
        return True
    return dtype.kind == "O"


def chunk_hash(chunk: np.ndarray) -> bytes:
    """Return the 32-byte SHA-256 digest of one edge-trimmed chunk.

    Parameters
    ----------
    chunk : numpy.ndarray
        The chunk's points, any shape (the shape is part of the digest), any
        dtype; object arrays must hold only ``str`` or ``bytes``.

    Returns
    -------
    bytes
        32 bytes, the same digest versioned-hdf5 2.6 stores in ``hash_table``.

    Raises
    ------
    TypeError
        An object array holds something other than ``str`` or ``bytes``.
    """
    h = hashlib.sha256()
    if is_vlen_string_dtype(chunk.dtype):
        if chunk.dtype.kind == "T":
            chunk = chunk.astype(object)
        for value in chunk.flat:
            if isinstance(value, str):
                value = value.encode("utf-8")
            elif not isinstance(value, bytes):
                raise TypeError(f"variable-length string data must hold str or bytes, got {type(value).__name__}")
            h.update(_LENGTH.pack(len(value)))
            h.update(value)
    else:
        h.update(np.ascontiguousarray(chunk).data)
    h.update(str(chunk.shape).encode("ascii"))
    return h.digest()
