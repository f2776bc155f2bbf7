"""A user's index, normalised, and the way back to numpy's result: :class:`IndexMapping`.

Built by :func:`~xarray_vhdf5._staging._map_index.map_index` (the rules are
in that module's docstring); the plans read its per-axis mappers (or, for a
basic index, :attr:`IndexMapping.basic`), the array applies its views to the
normalised result (:meth:`IndexMapping.to_result`) or value
(:meth:`IndexMapping.to_normalised`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import kernels
from .chunk_mapper import IndexChunkMapper

__all__ = ["IndexMapping"]


class IndexMapping:
    """A user's index, normalised: one mapper per axis and the way to numpy's result.

    From the normalised result ``out`` (shape :attr:`norm_shape`) to numpy's
    result: ``out[getitem_view]`` (reversed axes, integer-array permutations),
    reshaped to drop the integer-indexed axes, then the array's axis moved
    first if :attr:`array_first`.  ``__setitem__`` runs the inverse on the
    value broadcast to :attr:`shape` (with ``setitem_view`` keeping the last
    of duplicate integers).

    Attributes
    ----------
    mappers : tuple of IndexChunkMapper
        One per axis of the array.
    norm_shape : tuple of int
        Shape of the normalised selection (``mapper.count`` per axis; 1 for
        integer indices).
    shape : tuple of int
        Shape of numpy's result, ``arr[index].shape``.
    getitem_view, setitem_view : tuple or None
        Per axis a slice (``:`` or ``::-1``) or an integer array; None when
        every element is ``:``.
    array_first : bool
        numpy moves the array's axis to the front: the integers and the
        array index are not adjacent in the index (an Ellipsis or slice
        between them, even one spanning no axis).
    array_axis : int or None
        Position of the array index's axis among the result's axes before
        ``array_first`` moves it.
    scalar : bool
        numpy returns a scalar (every axis indexed by an integer, no Ellipsis).
    expanded_shape : tuple of int
        numpy's result with the integer-indexed axes kept (length 1) and no
        axis moved: the value's shape right before ``setitem_view``.
    basic : tuple or None
        For a *basic* index (one slice or integer per axis, the hot path):
        ``(starts, steps, counts, kinds)``, the normalised slice of every
        axis (``steps >= 1``) and its :data:`~xarray_vhdf5._staging.kernels.KIND_SLICE`,
        ``KIND_REVERSE`` or ``KIND_SCALAR``;
        the plans then fuse steps 2-7 in one kernel call
        (:func:`~xarray_vhdf5._staging.kernels.basic_slices`).  None otherwise.
    chunking : tuple or None
        ``(shape, chunk_size)`` of the array, for basic indices.
    """

    __slots__ = (
        "_mappers",
        "array_axis",
        "array_first",
        "basic",
        "chunking",
        "expanded_shape",
        "getitem_view",
        "norm_shape",
        "scalar",
        "setitem_view",
        "shape",
    )

    def __init__(
        self,
        mappers: tuple[IndexChunkMapper, ...] | None,
        norm_shape: tuple[int, ...],
        shape: tuple[int, ...],
        getitem_view: tuple | None = None,
        setitem_view: tuple | None = None,
        array_first: bool = False,
        array_axis: int | None = None,
        scalar: bool = False,
        *,
        expanded_shape: tuple[int, ...] | None = None,
        basic: tuple | None = None,
        chunking: tuple | None = None,
    ):
        self._mappers = mappers
        self.basic = basic
        self.norm_shape = norm_shape
        self.shape = shape
        self.expanded_shape = norm_shape if expanded_shape is None else expanded_shape
        self.getitem_view = getitem_view
        self.setitem_view = setitem_view
        self.array_first = array_first
        self.array_axis = array_axis
        self.scalar = scalar
        self.chunking = chunking

    @property
    def mappers(self) -> tuple[IndexChunkMapper, ...]:
        """One :class:`IndexChunkMapper` per axis (built on first use for basic indices)."""
        if self._mappers is None:
            assert self.basic is not None and self.chunking is not None, "built eagerly for other indices"
            starts, steps, counts, kinds = self.basic
            shape, chunk_size = self.chunking
            self._mappers = tuple(
                IndexChunkMapper.from_slice(
                    a,
                    s,
                    n,
                    size,
                    c,
                    kind="scalar" if k == kernels.KIND_SCALAR else "slice",
                    reverse=k == kernels.KIND_REVERSE,
                )
                for a, s, n, k, size, c in zip(starts, steps, counts, kinds, shape, chunk_size)
            )
        return self._mappers

    def __repr__(self) -> str:
        return f"IndexMapping<shape={self.shape}, norm_shape={self.norm_shape}, view={self.format_view()}>"

    def to_result(self, out: np.ndarray) -> Any:
        """numpy's result from the normalised one (a view of ``out`` when possible)."""
        if self.getitem_view is not None:
            out = out[self.getitem_view]
        if self.array_first:
            assert self.array_axis is not None
            out = out.reshape(_unmoved(self.shape, self.array_axis))
            return np.moveaxis(out, self.array_axis, 0)
        if out.shape != self.shape:
            out = out.reshape(self.shape)
        return out[()] if self.scalar else out

    def to_normalised(self, value: np.ndarray) -> np.ndarray:
        """The normalised value (:attr:`norm_shape`) from numpy's value (:attr:`shape`)."""
        if self.array_first:
            assert self.array_axis is not None
            value = np.moveaxis(value, 0, self.array_axis)
        value = value.reshape(self.expanded_shape)
        if self.setitem_view is not None:
            value = value[self.setitem_view]
        return value

    def format_view(self, which: str = "getitem") -> str:
        """The view as it would be written in Python, e.g. ``[:, ::-1]`` (``0``: axis dropped)."""
        if not self.mappers:
            return "[()]"
        parts = []
        for m in self.mappers:
            if m.kind == "scalar" and which == "getitem":
                parts.append("0")
                continue
            parts.append(_format_elem(m.getitem_view if which == "getitem" else m.setitem_view))
        text = "[" + ", ".join(parts) + "]"
        if self.array_first and which == "getitem":
            text += f".moveaxis({self.array_axis}, 0)"
        return text


def _unmoved(shape: tuple[int, ...], array_axis: int) -> tuple[int, ...]:
    out = list(shape[1:])
    out.insert(array_axis, shape[0])
    return tuple(out)


def _format_elem(v: Any) -> str:
    if isinstance(v, slice):
        return (
            ("" if v.start is None else str(v.start))
            + ":"
            + ("" if v.stop is None else str(v.stop))
            + ("" if v.step is None else f":{v.step}")
        )
    if isinstance(v, np.ndarray):
        return f"array({v.tolist()})" if v.size <= 8 else f"array(<{v.size} points>)"
    return str(v)
