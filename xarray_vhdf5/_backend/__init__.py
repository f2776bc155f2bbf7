"""The on-disk backend: the format's layout, chunk hashing, raw data, hash tables,
virtual datasets, libhdf5's metadata cache, and the kernels that move data between
HDF5 and numpy.

This is the only layer that writes datasets to HDF5 (``docs/design.md``, "Layers").
"""

from .chunkmap import build_slab_indices_and_offsets, build_slab_indices_and_offsets_reference
from .chunks import chunk_grid_shape, guess_chunks_h5py, guess_chunks_record, iter_chunks, normalize_chunks
from .hashing import chunk_hash
from .hashtable import HashTable
from .layout import DATA_VERSION, FIRST_VERSION, TIMESTAMP_FORMAT, VERSION_DATA, VERSIONS
from .mdc import trim_metadata_cache
from .raw_data import ChunkWriter, Filters, WriteStats, create_raw_data, is_fill_chunk
from .transfer import (
    get_kernel_backend,
    kernel_backend,
    read_many_slices,
    read_many_slices_reference,
    set_kernel_backend,
)
from .virtual import copy_virtual_dataset, create_virtual_dataset

__all__ = [
    "DATA_VERSION",
    "FIRST_VERSION",
    "TIMESTAMP_FORMAT",
    "VERSIONS",
    "VERSION_DATA",
    "ChunkWriter",
    "Filters",
    "HashTable",
    "WriteStats",
    "build_slab_indices_and_offsets",
    "build_slab_indices_and_offsets_reference",
    "chunk_grid_shape",
    "chunk_hash",
    "copy_virtual_dataset",
    "create_raw_data",
    "create_virtual_dataset",
    "get_kernel_backend",
    "guess_chunks_h5py",
    "guess_chunks_record",
    "is_fill_chunk",
    "iter_chunks",
    "kernel_backend",
    "normalize_chunks",
    "read_many_slices",
    "read_many_slices_reference",
    "set_kernel_backend",
    "trim_metadata_cache",
]
