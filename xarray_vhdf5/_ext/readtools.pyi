"""Type stub of the compiled basic-index kernels (``_ext/readtools.pyx``); private.

Use :mod:`xarray_vhdf5._staging.kernels`, which documents the invariants and
holds the pure-Python references.
"""

import numpy as np
import numpy.typing as npt

__all__ = ["parse_basic", "read_basic"]

def parse_basic(
    idx: object, shape: tuple[int, ...]
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]] | None:
    """``(starts, steps, counts, kinds)`` of a basic index, or None."""

def read_basic(
    idx: object,
    shape: tuple[int, ...],
    chunk_size: tuple[int, ...],
    slab_indices: npt.NDArray[np.intp],
    slab_offsets: npt.NDArray[np.uint64],
    slabs: list[object],
    lazy: list[object],
    dtype: np.dtype,
) -> object:
    """numpy's ``arr[idx]`` for a basic index over in-memory numpy slabs, or None."""
