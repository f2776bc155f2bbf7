"""Type stub of the compiled kernels (``_ext/slicetools.pyx``); private.

Use :mod:`xarray_vhdf5._backend.transfer` and :mod:`xarray_vhdf5._backend.chunkmap`,
which validate every argument: the kernels do no bounds checking.
"""

import h5py
import numpy as np
import numpy.typing as npt

__all__ = ["build_slab_indices_and_offsets", "read_many_slices"]

def read_many_slices(
    src: h5py.Dataset | np.ndarray,
    dst: np.ndarray,
    src_start: npt.NDArray[np.uint64],
    dst_start: npt.NDArray[np.uint64],
    count: npt.NDArray[np.uint64],
    src_stride: npt.NDArray[np.uint64],
    dst_stride: npt.NDArray[np.uint64],
    mem_type_id: int = -1,
) -> None:
    """Unchecked transfer; index arrays C-contiguous uint64 of shape (nslices, dst.ndim).

    ``mem_type_id`` (HDF5 id of ``dst.dtype``) is required for an h5py source,
    which also requires a C-contiguous ``dst``.  Raises HDF5Error on libhdf5
    failures, ValueError / TypeError on inconsistent shapes, ranks or item sizes.
    """

def build_slab_indices_and_offsets(
    dset: h5py.Dataset,
    shape: tuple[int, ...],
    chunks: tuple[int, ...],
    raw_data_name: str,
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.uint64]]:
    """``(slab_indices, slab_offsets)`` of a virtual dataset; see backend.chunkmap."""
