"""From a user's index to per-axis chunk selections: step 1 of the plans (versioned-hdf5's ``staged_changes.rst``).

:func:`map_index` normalises anything numpy accepts on an ``h5py.Dataset``
into one :class:`IndexChunkMapper` per axis plus the views that turn the
*normalised* selection into numpy's result::

    index (numpy semantics)           normalised, per axis              view applied to the result
    ------------------------------    ------------------------------    --------------------------
    integer i                         the single point i                drop the axis
    slice with step > 0               the same slice                    -
    slice with step < 0               the same points, ascending        reverse the axis
    integer array (any order, dups)   the sorted unique points          take(inverse)
    boolean array (1-d)               its nonzero points                -

The normalised selection is a cartesian product of ascending point sets, one
per axis; the transfers fill a C-contiguous array of its shape (``value`` /
``out`` in the printed plans), and ``getitem_view`` / ``setitem_view`` map it to
numpy's result or from numpy's value.  For ``__setitem__`` with duplicate
integers the *last* occurrence wins, as in numpy.  Integers next to an
integer array follow numpy's rule for advanced indices: when they are not
adjacent (e.g. ``a[0, :, [1, 2]]``) the array's axis moves first.

Supported: integers (Python, numpy, 0-d integer arrays), slices with any step,
one Ellipsis, at most one integer or 1-d boolean array index.  Everything else
numpy accepts raises :class:`~xarray_vhdf5.errors.UnsupportedError` (numpy's
newaxis, a second array index, n-d arrays, boolean scalars); what numpy
rejects raises numpy's ``IndexError`` / ``TypeError`` / ``ValueError`` with
numpy's message.  Integer and boolean arrays are validated and normalised with
ndindex; integers and slices, the hot path, with Python's own ``slice.indices``.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import UnsupportedError
from . import kernels
from ._normalised_index import IndexMapping
from .chunk_mapper import IndexChunkMapper
from .index_elements import as_array_index, axis_error, expand_index

__all__ = ["IndexChunkMapper", "IndexMapping", "map_index", "map_index_general"]


_REVERSE = slice(None, None, -1)
_ALL = slice(None)


def _map_basic(idx: Any, shape: tuple[int, ...], chunk_size: tuple[int, ...]) -> IndexMapping | None:
    """The hot path of :func:`map_index`: one ``slice`` or ``int`` per axis.

    Parsed by :func:`~xarray_vhdf5._staging.kernels.parse_basic`; no mapper
    is built (:attr:`IndexMapping.mappers` builds them on demand), the plans
    use :attr:`IndexMapping.basic`.  Returns None for anything else (the
    general path handles it, numpy's errors included).
    """
    parsed = kernels.active().parse_basic(idx, shape)
    if parsed is None:
        return None
    counts, kinds = parsed[2], parsed[3]
    reverse = kernels.KIND_REVERSE in kinds
    if kinds and not reverse and kernels.KIND_SCALAR not in kinds:
        # Only slices with step > 0 (the commonest case): no view at all.
        return IndexMapping(None, counts, counts, basic=parsed, chunking=(shape, chunk_size))
    out_shape = tuple([n for n, k in zip(counts, kinds) if k != kernels.KIND_SCALAR])
    view = None
    if reverse:
        view = tuple([_REVERSE if k == kernels.KIND_REVERSE else _ALL for k in kinds])
    return IndexMapping(
        None,
        counts,
        out_shape,
        view,
        view,
        scalar=not out_shape,
        basic=parsed,
        chunking=(shape, chunk_size),
    )


def map_index(idx: Any, shape: Sequence[int], chunk_size: Sequence[int]) -> IndexMapping:
    """Normalise a numpy index on an array of ``shape`` chunked by ``chunk_size``.

    Parameters
    ----------
    idx : Any
        What the user passed to ``__getitem__`` / ``__setitem__``.
    shape, chunk_size : sequence of int
        In points.

    Returns
    -------
    IndexMapping

    Raises
    ------
    IndexError
        numpy would raise it: an integer or array value out of bounds, too
        many indices, several Ellipsis, a boolean array of the wrong length,
        an index of an invalid type (float, str, ...).
    TypeError
        A slice bound that is not an integer (numpy's message).
    ValueError
        A slice step of zero.
    xarray_vhdf5.errors.UnsupportedError
        Valid for numpy but not supported (versioned-hdf5's ``staged_changes.rst``: a plan maps
        every axis independently): ``None`` / newaxis, more than one array
        index, n-d integer or boolean arrays, boolean scalars.
    """
    fast = _map_basic(idx, tuple(shape), tuple(chunk_size))
    if fast is not None:
        return fast
    return map_index_general(idx, shape, chunk_size)


def map_index_general(idx: Any, shape: Sequence[int], chunk_size: Sequence[int]) -> IndexMapping:
    """:func:`map_index` without its hot path: per-axis mappers for every index.

    The plans take their general path for the result (``mapping.basic`` is
    None); the tests compare it with the basic-index path. Parameters, return
    value and errors are those of :func:`map_index`.
    """
    ndim = len(shape)
    elems, where, has_ellipsis = expand_index(idx, ndim)
    mappers: list[IndexChunkMapper] = []
    array_pos: list[int] = []  # positions of the array index (at most one)
    int_pos: list[int] = []
    needs_view = False
    for axis, elem in enumerate(elems):
        size = shape[axis]
        cs = chunk_size[axis]
        if isinstance(elem, slice):
            start, stop, step = elem.indices(size)
            count = len(range(start, stop, step))
            if step < 0:
                if count:
                    last = start + (count - 1) * step
                    mappers.append(IndexChunkMapper.from_slice(last, -step, count, size, cs, reverse=True))
                    needs_view = True
                else:
                    mappers.append(IndexChunkMapper.from_slice(0, 1, 0, size, cs))
            else:
                mappers.append(IndexChunkMapper.from_slice(start, step, count, size, cs))
            continue
        if isinstance(elem, (bool, np.bool_)):
            raise UnsupportedError("a boolean scalar index adds an axis in numpy; not supported by staged arrays")
        if isinstance(elem, (int, np.integer)):
            i = operator.index(elem)
        else:
            converted = as_array_index(elem, axis, shape)
            if isinstance(converted, np.ndarray):
                if array_pos:
                    raise UnsupportedError(
                        "more than one array index is valid for numpy (the arrays are broadcast "
                        "together) but not supported by staged arrays; index one axis at a time"
                    )
                array_pos.append(axis)
                m = IndexChunkMapper.from_points(converted, size, cs)
                mappers.append(m)
                if not isinstance(m.getitem_view, slice):
                    needs_view = True
                continue
            i = converted
        if i < -size or i >= size:
            raise axis_error(i, axis, size)
        if i < 0:
            i += size
        int_pos.append(axis)
        mappers.append(IndexChunkMapper.from_slice(i, 1, 1, size, cs, kind="scalar"))

    norm_shape = tuple(m.count for m in mappers)
    result_shape = [m.length for m in mappers if m.kind != "scalar"]
    array_first = False
    array_axis = None
    if array_pos:
        advanced = sorted(where[p] for p in array_pos + int_pos)
        array_first = advanced[-1] - advanced[0] + 1 != len(advanced)
        # The array's axis in the result once the integer axes are dropped.
        array_axis = array_pos[0] - sum(1 for p in int_pos if p < array_pos[0])
        if array_first:
            result_shape.insert(0, result_shape.pop(array_axis))
            needs_view = True
    shape_out = tuple(result_shape)

    getitem_view = setitem_view = None
    if needs_view:
        getitem_view = tuple(m.getitem_view for m in mappers)
        setitem_view = tuple(m.setitem_view for m in mappers)
        if all(isinstance(v, slice) and v == slice(None) for v in getitem_view):
            getitem_view = None
        if all(isinstance(v, slice) and v == slice(None) for v in setitem_view):
            setitem_view = None
    scalar = not has_ellipsis and not array_pos and len(int_pos) == ndim
    return IndexMapping(
        expanded_shape=tuple(1 if m.kind == "scalar" else m.length for m in mappers),
        mappers=tuple(mappers),
        norm_shape=norm_shape,
        shape=shape_out,
        getitem_view=getitem_view,
        setitem_view=setitem_view,
        array_first=array_first,
        array_axis=array_axis,
        scalar=scalar,
    )
