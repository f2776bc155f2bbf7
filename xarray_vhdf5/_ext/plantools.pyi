"""Type stub of the compiled plan kernels (``_ext/plantools.pyx``); private.

Use :mod:`xarray_vhdf5._staging.kernels`, which documents the invariants the
callers guarantee and holds the pure-Python reference implementations.
"""

import numpy as np
import numpy.typing as npt

__all__ = [
    "SIDE_SLAB",
    "SIDE_VALUE",
    "basic_slices",
    "expand_slices",
    "gather_chunks",
    "slice_rows",
]

SIDE_SLAB: int
SIDE_VALUE: int

def slice_rows(
    start: int, step: int, count: int, chunk_size: int, axis_size: int
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.bool_], npt.NDArray[np.uint64]]:
    """``(chunk_indices, whole, rows)`` of ``start + step * arange(count)``, one row per chunk."""

def gather_chunks(
    slab_indices: npt.NDArray[np.intp],
    slab_offsets: npt.NDArray[np.uint64],
    chunk_indices: tuple[npt.NDArray[np.intp], ...],
    n_slabs: int,
) -> tuple[
    npt.NDArray[np.intp],
    npt.NDArray[np.intp],
    npt.NDArray[np.intp],
    npt.NDArray[np.uint64],
    npt.NDArray[np.intp],
]:
    """``(pos, flat, slab, offset, groups)`` of the selected chunks, sorted by slab."""

def expand_slices(
    pos: npt.NDArray[np.intp],
    rows: tuple[npt.NDArray[np.uint64], ...],
    row_ptrs: tuple[npt.NDArray[np.intp] | None, ...],
    src_side: int,
    dst_side: int,
    src_offset: npt.NDArray[np.uint64] | None = None,
    dst_offset: npt.NDArray[np.uint64] | None = None,
) -> tuple[
    npt.NDArray[np.uint64],
    npt.NDArray[np.uint64],
    npt.NDArray[np.uint64],
    npt.NDArray[np.uint64],
    npt.NDArray[np.uint64],
    npt.NDArray[np.intp],
]:
    """``(src_start, dst_start, count, src_stride, dst_stride, point_end)``."""

def basic_slices(
    starts: tuple[int, ...],
    steps: tuple[int, ...],
    counts: tuple[int, ...],
    chunk_size: tuple[int, ...],
    shape: tuple[int, ...],
    slab_indices: npt.NDArray[np.intp],
    slab_offsets: npt.NDArray[np.uint64],
    n_slabs: int,
    src_side: int,
    dst_side: int,
) -> tuple[
    npt.NDArray[np.intp],
    npt.NDArray[np.uint64],
    npt.NDArray[np.uint64],
    npt.NDArray[np.uint64],
    npt.NDArray[np.uint64],
    npt.NDArray[np.uint64],
]:
    """``(groups, src_start, dst_start, count, src_stride, dst_stride)`` of a basic index."""
