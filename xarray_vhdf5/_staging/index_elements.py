"""A user's index as one element per axis: Ellipsis expansion and array validation.

The element-wise part of :func:`~xarray_vhdf5._staging._map_index.map_index`:
:func:`expand_index` spreads the index over the axes (numpy's rules for Ellipsis and
for too many indices), :func:`as_array_index` validates and normalises an
integer or boolean array index with ndindex (numpy's errors and messages),
:func:`axis_error` is numpy's out-of-bounds error.  What numpy accepts but
staged arrays do not raises :class:`~xarray_vhdf5.errors.UnsupportedError`.
Used by :mod:`xarray_vhdf5._staging._map_index` only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ndindex
import numpy as np

from ..errors import UnsupportedError

__all__ = ["as_array_index", "axis_error", "expand_index"]

_VALID_INDICES = (
    "only integers, slices (`:`), ellipsis (`...`), numpy.newaxis (`None`) and integer or "
    "boolean arrays are valid indices"
)


def axis_error(i: int, axis: int, size: int) -> IndexError:
    """numpy's error for the integer ``i`` out of ``[-size, size)`` on ``axis`` (not raised)."""
    return IndexError(f"index {i} is out of bounds for axis {axis} with size {size}")


def expand_index(idx: Any, ndim: int) -> tuple[list[Any], list[int], bool]:
    """The index as one element per axis (Ellipsis expanded).

    Also returns, per axis, the position of its element in the user's tuple
    (numpy decides where the axis of an array index goes from those
    positions: an Ellipsis separates advanced indices even when it expands
    to no axis), and whether there was an Ellipsis.

    Parameters
    ----------
    idx : Any
        What the user passed to ``__getitem__`` / ``__setitem__``.
    ndim : int
        The array's number of dimensions.

    Returns
    -------
    elements : list, length ndim
        The index's elements, ``slice(None)`` for the axes it leaves out.
    where : list of int, length ndim
        Per axis, the position of its element in the user's tuple.
    has_ellipsis : bool

    Raises
    ------
    IndexError
        Several Ellipsis, or more indices than ``ndim`` (numpy's messages).
    xarray_vhdf5.errors.UnsupportedError
        ``None`` (numpy.newaxis) in the index.
    """
    if not isinstance(idx, tuple):
        idx = (idx,)
    n_ellipsis = 0
    n_real = 0
    for elem in idx:
        if elem is Ellipsis:
            n_ellipsis += 1
        elif elem is None:
            raise UnsupportedError(
                "numpy.newaxis (None) in an index is valid for numpy but not supported by "
                "staged arrays (nor by h5py); add the axis to the result instead "
                "(e.g. np.expand_dims(arr[...], axis))"
            )
        else:
            n_real += 1
    if n_ellipsis > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if n_real > ndim:
        raise IndexError(f"too many indices for array: array is {ndim}-dimensional, but {n_real} were indexed")
    out: list[Any] = []
    where: list[int] = []
    for k, elem in enumerate(idx):
        if elem is Ellipsis:
            out.extend([slice(None)] * (ndim - n_real))
            where.extend([k] * (ndim - n_real))
        else:
            out.append(elem)
            where.append(k)
    while len(out) < ndim:
        where.append(len(idx) + len(out))
        out.append(slice(None))
    return out, where, n_ellipsis > 0


def as_array_index(elem: Any, axis: int, shape: Sequence[int]) -> np.ndarray | int:
    """Validate an array-like index with ndindex: an int (0-d) or 1-d ascending-or-not points.

    Parameters
    ----------
    elem : Any
        The index's element for ``axis``: not a slice, Ellipsis or Python integer.
    axis : int
    shape : sequence of int
        The array's shape, in points.

    Returns
    -------
    int or numpy.ndarray of intp, shape (n,)
        A 0-d integer array as an int (bounds not checked); the points of an
        integer array (any order, duplicates kept, negative values wrapped) or
        of a 1-d boolean array (ascending).

    Raises
    ------
    IndexError
        Not a valid numpy index, a point out of bounds, a boolean array of the
        wrong length (numpy's messages, via ndindex).
    xarray_vhdf5.errors.UnsupportedError
        A boolean scalar, an n-d integer or boolean array.
    """
    try:
        idx = ndindex.ndindex(elem)
    except IndexError:
        raise
    except (TypeError, ValueError) as exc:
        raise IndexError(f"{_VALID_INDICES} (got {type(elem).__name__}: {exc})") from None
    if isinstance(idx, ndindex.BooleanArray):
        if idx.ndim == 0:
            raise UnsupportedError("a boolean scalar index adds an axis in numpy; not supported by staged arrays")
        if idx.ndim > 1:
            raise UnsupportedError(
                f"a {idx.ndim}-d boolean index spans several axes; staged arrays (like h5py) "
                "only support 1-d boolean arrays, one per index"
            )
        idx = idx.reduce(tuple(shape), axis=axis)
        return np.flatnonzero(idx.raw).astype(np.intp)
    if isinstance(idx, ndindex.IntegerArray):
        if idx.ndim == 0:
            return int(idx.raw)
        if idx.ndim > 1:
            raise UnsupportedError(
                f"a {idx.ndim}-d integer array index reshapes the result; staged arrays "
                "(like h5py) only support 1-d integer arrays"
            )
        return idx.reduce(tuple(shape), axis=axis).raw.astype(np.intp, copy=False)
    if isinstance(idx, ndindex.Integer):
        return int(idx.raw)
    raise IndexError(_VALID_INDICES)
