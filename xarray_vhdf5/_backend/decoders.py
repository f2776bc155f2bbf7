"""The HDF5 filters decoded without libhdf5, for reading a manifest's chunks.

Decoders (HDF5 User Guide, "HDF5 Datasets", filters; bit ``i`` of a chunk's
filter mask is set when filter ``i`` of the pipeline was skipped for it, as an
optional filter is when it cannot shrink the chunk). All are applied in
reverse pipeline order (:meth:`~xarray_vhdf5._backend.manifest.ChunkManifest.read`):

- deflate (1, a zlib stream): libdeflate, ``imagecodecs.deflate_decode``;
- shuffle (2): ``numcodecs.Shuffle`` (HDF5's byte shuffle, checked against it);
- fletcher32 (3): HDF5's own ``H5_checksum_fletcher32`` in
  ``imagecodecs.h5checksum_fletcher32``, accepting what H5Zfletcher32.c
  accepts (the sum, or the sum with the bytes of each 16-bit half swapped);
- h5py's LZF (32000, raw LZF without header): ``imagecodecs.lzf_decode``;
- hdf5plugin's Blosc (32001), LZ4 (32004, HDF5's block framing) and Zstandard
  (32015): ``imagecodecs.blosc_decode``, ``lz4h5_decode``, ``zstd_decode``.

szip, nbit, scaleoffset and other plugins (bitshuffle, ...) are unsupported: a
dataset using one gets a manifest with ``supported`` False.
"""

from __future__ import annotations

import h5py
import imagecodecs
import numcodecs

__all__ = ["DECODED_FILTERS"]


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
