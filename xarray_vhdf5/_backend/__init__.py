"""The on-disk backend: the format's layout, chunk hashing, raw data, hash tables,
virtual datasets, libhdf5's metadata cache, and the kernels that move data between
HDF5 and numpy.

This is the only layer that writes datasets to HDF5 (``docs/design.md``, "Layers").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_module

if TYPE_CHECKING:
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

#: The module each name comes from, imported on first use (PEP 562): a command
#: such as ``vhdf5 log`` then loads only the modules it needs.
_HOMES = {
    "ChunkWriter": "raw_data",
    "DATA_VERSION": "layout",
    "FIRST_VERSION": "layout",
    "Filters": "raw_data",
    "HashTable": "hashtable",
    "TIMESTAMP_FORMAT": "layout",
    "VERSIONS": "layout",
    "VERSION_DATA": "layout",
    "WriteStats": "raw_data",
    "build_slab_indices_and_offsets": "chunkmap",
    "build_slab_indices_and_offsets_reference": "chunkmap",
    "chunk_grid_shape": "chunks",
    "chunk_hash": "hashing",
    "copy_virtual_dataset": "virtual",
    "create_raw_data": "raw_data",
    "create_virtual_dataset": "virtual",
    "get_kernel_backend": "transfer",
    "guess_chunks_h5py": "chunks",
    "guess_chunks_record": "chunks",
    "is_fill_chunk": "raw_data",
    "iter_chunks": "chunks",
    "kernel_backend": "transfer",
    "normalize_chunks": "chunks",
    "read_many_slices": "transfer",
    "read_many_slices_reference": "transfer",
    "set_kernel_backend": "transfer",
    "trim_metadata_cache": "mdc",
}


__getattr__, __dir__ = lazy_module(__name__, _HOMES, __all__)
