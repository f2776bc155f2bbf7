"""The fused ``__getitem__`` fast path of in-memory chunks: its pure-Python reference.

The compiled ``read_basic`` (``_ext/readtools.pyx``) answers
:meth:`~xarray_vhdf5._staging.array.StagedChangesArray.__getitem__` in one
call for a basic index whose chunks are all in memory;
:func:`read_basic_reference` is its specification, composed of the reference
kernels of :mod:`xarray_vhdf5._staging.reference_kernels`.
"""

from __future__ import annotations

import numpy as np

from .reference_kernels import (
    KIND_REVERSE,
    KIND_SCALAR,
    SIDE_SLAB,
    SIDE_VALUE,
    basic_slices_reference,
    parse_basic_reference,
)

__all__ = ["read_basic_reference"]


def read_basic_reference(
    idx: object,
    shape: tuple[int, ...],
    chunk_size: tuple[int, ...],
    slab_indices: np.ndarray,
    slab_offsets: np.ndarray,
    slabs: list,
    lazy: list,
    dtype: np.dtype,
) -> object:
    """Pure-Python reference of the compiled ``read_basic``: ``__getitem__`` fused.

    For a basic index (:func:`~xarray_vhdf5._staging.kernels.parse_basic`) whose
    selected chunks all lie on numpy arrays of exactly ``dtype`` (``type(slab)
    is numpy.ndarray``) with no pending conversion (``lazy[slab] is None``):
    numpy's result of ``arr[idx]`` (a new array, or a numpy scalar when every
    axis is an integer), copied chunk by chunk from the boxes of
    :func:`~xarray_vhdf5._staging.kernels.basic_slices`.
    None when it does not apply - not a basic index, a 0-d array, a dtype
    holding Python objects or of no fixed size, a chunk elsewhere, metadata
    reaching beyond a slab - and the general path
    (:class:`~xarray_vhdf5._staging.item_plans.GetItemPlan`) must answer instead.

    ``tests/test_plantools.py`` checks the compiled kernel against this
    function, ``tests/test_staging_fastpath.py`` both against the general path.
    """
    dtype = np.dtype(dtype)
    parsed = parse_basic_reference(idx, shape)
    if parsed is None or not shape or dtype.hasobject or dtype.num >= _NTYPES_LEGACY:
        return None
    if dtype.itemsize == 0 or len(lazy) != len(slabs):
        return None
    starts, steps, counts, kinds = parsed
    try:
        groups, src_start, dst_start, count, src_stride, _ = basic_slices_reference(
            starts,
            steps,
            counts,
            tuple(chunk_size),
            tuple(shape),
            slab_indices,
            slab_offsets,
            len(slabs),
            SIDE_SLAB,
            SIDE_VALUE,
        )
    except (ValueError, IndexError):
        return None
    out = np.empty(counts, dtype=dtype)
    for s, a, b in groups.tolist():
        src = slabs[s]
        if lazy[s] is not None or type(src) is not np.ndarray:
            return None
        if src.ndim != len(shape) or src.dtype != dtype:
            return None
        for k in range(a, b):
            c = count[k].tolist()
            if not all(c):
                continue
            first = src_start[k].tolist()
            stride = src_stride[k].tolist()
            lasts = [f + (n - 1) * st for f, n, st in zip(first, c, stride)]
            if any(last >= size for last, size in zip(lasts, src.shape)):
                return None
            src_box = tuple(slice(f, last + 1, st) for f, last, st in zip(first, lasts, stride))
            dst_box = tuple(slice(f, f + n) for f, n in zip(dst_start[k].tolist(), c))
            out[dst_box] = src[src_box]
    if KIND_REVERSE in kinds:
        out = out[tuple(slice(None, None, -1) if k == KIND_REVERSE else slice(None) for k in kinds)]
    result_shape = tuple(n for n, k in zip(counts, kinds) if k != KIND_SCALAR)
    out = np.ascontiguousarray(out).reshape(result_shape)
    return out if result_shape else out[()]


#: numpy's built-in dtype numbers are below this (``NPY_NTYPES_LEGACY``).
_NTYPES_LEGACY = 24
