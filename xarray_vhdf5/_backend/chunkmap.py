"""Where each chunk of a version's virtual dataset lives: ``slab_indices`` / ``slab_offsets``.

A version's dataset is a virtual dataset whose mappings point chunks at rows
of the dataset's ``raw_data`` (``docs/format.md``, "Commit rules"); chunks without
a mapping are entirely fill value.  The staging engine (versioned-hdf5's ``staged_changes.rst``)
describes the same information with two arrays of one point per chunk::

    chunks = (10, 10), shape = (30, 50)        raw_data (chunks[0] rows per chunk)

    slab_indices      slab_offsets             rows  0:10  chunk A
    1 0 1 0 0          0  0 10  0  0           rows 10:20  chunk B
    0 0 0 0 0          0  0  0  0  0           rows 20:30  chunk C
    0 0 1 1 1          0  0 20 20 30

    0 = unmapped (all fill value, the "full slab"), 1 = stored in raw_data
    (the base slab), at rows slab_offsets .. slab_offsets + chunks[0].

A mapping normally covers exactly one chunk, trimmed at the dataset's edges.
One mapping may also cover a run of chunks along axis 0 whose source rows are
consecutive in raw_data: chunk ``k`` of the run then starts ``k * chunks[0]``
rows after the mapping's first source row.  Mappings that cannot be expressed
this way (not chunk aligned, ending inside a chunk, spanning several chunks on
another axis, overlapping) are rejected: reading them through the slab arrays
would return wrong data.

Two implementations with identical results, selected like the transfer
kernels (:func:`xarray_vhdf5._backend.transfer.set_kernel_backend`,
``XARRAY_VHDF5_KERNELS``): the compiled one reads the mappings with libhdf5
directly, without the GIL; the reference one uses h5py's
``Dataset.virtual_sources()``.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import h5py
import numpy as np

from ..errors import ClosedFileError, IncompatibleDataError, UnsupportedError
from . import transfer
from ._kernels import slicetools as _slicetools
from .chunks import chunk_grid_shape
from .h5attrs import read_attr

__all__ = [
    "build_slab_indices_and_offsets",
    "build_slab_indices_and_offsets_reference",
    "mapped_starts",
    "version_dataset_layout",
]


def version_dataset_layout(vds: h5py.Dataset) -> tuple[tuple[int, ...], str]:
    """``(chunks, raw_data path)`` that a version's dataset names in its attributes.

    ``docs/format.md``: every version's virtual dataset carries ``chunks`` (int64, its
    chunk shape in points) and ``raw_data`` (the absolute path of the raw_data
    its chunks map to), as versioned-hdf5 writes them.

    Parameters
    ----------
    vds : h5py.Dataset
        A dataset of a committed version.

    Returns
    -------
    chunks : tuple of int
        Points per chunk along each axis.
    raw_path : str
        Absolute path of its raw_data.

    Raises
    ------
    IncompatibleDataError
        ``vds`` lacks either attribute (not a dataset of a version).
    """
    try:
        chunks = read_attr(vds.id, "chunks", expect="int")
        raw = read_attr(vds.id, "raw_data", expect="str")
    except KeyError:
        raise IncompatibleDataError(
            f"{vds.name!r} is not a versioned dataset (no 'chunks' and 'raw_data' attributes)"
        ) from None
    raw = raw.decode() if isinstance(raw, bytes) else str(raw)
    return tuple(int(c) for c in np.atleast_1d(chunks)), raw


def _validate(
    dset: h5py.Dataset,
    shape: Sequence[int],
    chunks: Sequence[int],
    raw_data: h5py.Dataset | str,
) -> tuple[tuple[int, ...], tuple[int, ...], str]:
    if not isinstance(dset, h5py.Dataset):
        raise TypeError(f"dset must be an h5py.Dataset, got {type(dset).__name__}")
    if not dset.id.valid:
        raise ClosedFileError("cannot read the chunk map of a closed dataset; reopen its file")
    try:
        shape = tuple(operator.index(n) for n in shape)
        chunks = tuple(operator.index(n) for n in chunks)
    except TypeError:
        raise TypeError(f"shape and chunks must be sequences of integers, got {shape!r} and {chunks!r}") from None
    if not shape:
        raise UnsupportedError("scalar (0-dimensional) datasets cannot be versioned")
    if shape != dset.shape:
        raise ValueError(f"shape {shape} does not match the shape of {dset.name!r}: {dset.shape}")
    if len(chunks) != len(shape) or any(c <= 0 for c in chunks):
        raise ValueError(f"chunks must be {len(shape)} positive integers for shape {shape}, got {chunks}")
    if not dset.is_virtual:
        raise ValueError(f"{dset.name!r} is not a virtual dataset (not a version's dataset)")
    if isinstance(raw_data, h5py.Dataset):
        if raw_data.file != dset.file:
            raise ValueError(
                f"raw_data {raw_data.name!r} is not in the file of {dset.name!r}; "
                "versioned virtual datasets only map into their own file"
            )
        name = raw_data.name
    elif isinstance(raw_data, str):
        name = raw_data
    else:
        raise TypeError(f"raw_data must be an h5py.Dataset or its name, got {type(raw_data)}")
    if not name.startswith("/"):
        raise ValueError(f"raw_data name must be an absolute HDF5 path, got {name!r}")
    return shape, chunks, name


def build_slab_indices_and_offsets(
    dset: h5py.Dataset,
    shape: Sequence[int],
    chunks: Sequence[int],
    raw_data: h5py.Dataset | str,
) -> tuple[np.ndarray, np.ndarray]:
    """Read a version's virtual mappings into ``slab_indices`` and ``slab_offsets``.

    Parameters
    ----------
    dset : h5py.Dataset
        One of the version datasets (``_version_data/versions/<v>/<name>``),
        a virtual dataset mapping into ``raw_data`` in the same file.
    shape : sequence of int
        The dataset's shape in points; must equal ``dset.shape``.
    chunks : sequence of int
        The chunk shape in points (``dset.attrs["chunks"]``), all > 0.
    raw_data : h5py.Dataset or str
        The dataset's raw_data, or its absolute HDF5 path; every mapping must
        read from it (source file ``"."``).

    Returns
    -------
    slab_indices : numpy.ndarray of numpy.intp, shape ``ceil(shape / chunks)``
        One point per chunk: 0 = no mapping (the chunk is all fill value),
        1 = stored in raw_data.
    slab_offsets : numpy.ndarray of numpy.uint64, same shape
        The chunk's first row along axis 0 in raw_data, in points (rows, not
        bytes); 0 where ``slab_indices`` is 0.  Along the other axes a chunk
        always starts at 0 in raw_data.

    Raises
    ------
    TypeError
        ``dset`` is not an h5py dataset; ``shape``/``chunks`` not integers.
    ValueError
        ``shape`` differs from ``dset.shape``; bad ``chunks``; ``dset`` is not
        virtual; a mapping reads from another file or dataset than
        ``raw_data``; a mapping is not a single block, not chunk aligned, ends
        inside a chunk, spans several chunks along an axis other than 0, or
        overlaps another one.
    xarray_vhdf5.errors.UnsupportedError
        A 0-dimensional dataset.
    xarray_vhdf5.errors.ClosedFileError
        ``dset``'s file was closed.
    xarray_vhdf5.errors.HDF5Error
        libhdf5 failed reading the mappings (compiled backend).

    Notes
    -----
    Invariants kept by ``tests/test_chunkmap.py``: compiled == reference on
    files written by versioned-hdf5 2.6.0, and reading every chunk from
    raw_data at these offsets reproduces ``dset[()]``.
    """
    shape, chunks, name = _validate(dset, shape, chunks, raw_data)
    if transfer.get_kernel_backend() == "python":
        return _reference(dset, shape, chunks, name)
    return _slicetools.build_slab_indices_and_offsets(dset, shape, chunks, name)


def build_slab_indices_and_offsets_reference(
    dset: h5py.Dataset,
    shape: Sequence[int],
    chunks: Sequence[int],
    raw_data: h5py.Dataset | str,
) -> tuple[np.ndarray, np.ndarray]:
    """Pure-Python reference implementation of :func:`build_slab_indices_and_offsets`.

    Same parameters, result and exceptions (except HDF5Error: h5py raises its
    own errors); reads the mappings with h5py's ``Dataset.virtual_sources()``.
    """
    shape, chunks, name = _validate(dset, shape, chunks, raw_data)
    return _reference(dset, shape, chunks, name)


def _block(start: Sequence[int], end: Sequence[int]) -> str:
    return "[" + ", ".join(f"{a}:{b + 1}" for a, b in zip(start, end)) + "]"


def _single_block(space: h5py.h5s.SpaceID, ndim: int, j: int) -> tuple[tuple, tuple]:
    rank = space.get_simple_extent_ndims()
    if rank != ndim:
        raise ValueError(f"virtual mapping {j}: a selection has rank {rank}, the dataset has {ndim}")
    start, end = space.get_select_bounds()
    if space.get_select_npoints() != np.prod([b - a + 1 for a, b in zip(start, end)]):
        raise ValueError(f"virtual mapping {j}: a selection is not a single rectangular block")
    return start, end


def _reference(
    dset: h5py.Dataset, shape: tuple[int, ...], chunks: tuple[int, ...], name: str
) -> tuple[np.ndarray, np.ndarray]:
    ndim = len(shape)
    grid = chunk_grid_shape(shape, chunks)
    slab_indices = np.zeros(grid, dtype=np.intp)
    slab_offsets = np.zeros(grid, dtype=np.uint64)
    what = f"{dset.name!r} cannot be expressed as raw_data slab offsets: "

    for j, vmap in enumerate(dset.virtual_sources()):
        if vmap.file_name != ".":
            raise ValueError(
                f"{what}virtual mapping {j}: source file is {vmap.file_name!r}, expected '.' (the same file)"
            )
        if vmap.dset_name != name:
            raise ValueError(f"{what}virtual mapping {j}: source dataset is {vmap.dset_name!r}, expected {name!r}")
        try:
            vstart, vend = _single_block(vmap.vspace, ndim, j)
            sstart, send = _single_block(vmap.src_space, ndim, j)
        except ValueError as exc:
            raise ValueError(what + str(exc)) from None
        prefix = f"{what}virtual mapping {j} (virtual {_block(vstart, vend)} <- raw_data{_block(sstart, send)})"
        for d in range(ndim):
            n = vend[d] - vstart[d] + 1
            if send[d] - sstart[d] + 1 != n:
                raise ValueError(f"{prefix}: virtual and source blocks differ in shape along axis {d}")
            if vend[d] >= shape[d]:
                raise ValueError(f"{prefix}: extends beyond the dataset's shape along axis {d}")
            if vstart[d] % chunks[d]:
                raise ValueError(f"{prefix}: does not start on a chunk boundary along axis {d}")
            if d > 0 and n > chunks[d]:
                raise ValueError(
                    f"{prefix}: spans several chunks along axis {d}; raw_data is one chunk "
                    "wide on every axis but 0, so only runs along axis 0 can be expressed"
                )
            if n % chunks[d] and vend[d] + 1 != shape[d]:
                raise ValueError(f"{prefix}: ends inside a chunk along axis {d} (not at the dataset's edge)")
            if d > 0 and sstart[d] != 0:
                raise ValueError(f"{prefix}: source block does not start at 0 along axis {d}")

        first = [a // c for a, c in zip(vstart, chunks)]
        nrun = -(-(vend[0] - vstart[0] + 1) // chunks[0])
        for k in range(nrun):
            chunk = (first[0] + k, *first[1:])
            if slab_indices[chunk]:
                raise ValueError(f"{prefix}: chunk {k} of the block is already mapped by another mapping")
            slab_indices[chunk] = 1
            slab_offsets[chunk] = sstart[0] + k * chunks[0]
    return slab_indices, slab_offsets


def mapped_starts(
    dset: h5py.Dataset, shape: Sequence[int], chunks: Sequence[int], raw_data: h5py.Dataset
) -> np.ndarray:
    """Per chunk of ``dset``'s grid, the first raw_data row its mapping reads (points along axis 0), -1 unmapped.

    :func:`build_slab_indices_and_offsets` as one int64 array of the grid's
    shape (``ceil(shape / chunks)``).

    Raises
    ------
    ValueError
        A mapping raw_data's chunks cannot express (as
        :func:`build_slab_indices_and_offsets`).
    """
    indices, offsets = build_slab_indices_and_offsets(dset, shape, chunks, raw_data)
    return np.where(indices != 0, offsets.astype(np.int64), -1)
