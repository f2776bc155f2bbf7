"""The parts of h5py's ``Group`` API a staged group adds on top of its own (versioned-hdf5 parity).

versioned-hdf5's ``InMemoryGroup`` subclasses ``h5py.Group`` and so answers
``parent``, ``file``, the ``MutableMapping`` methods (``pop``, ``popitem``,
``setdefault``, ``update``, ``clear``), ``create_dataset_like`` and
``visit_links`` / ``visititems_links`` (h5py 3.11). :class:`GroupAPI` gives a staged group the same: the mapping
methods are ``collections.abc.MutableMapping``'s (as h5py's are) over the
group's own ``__getitem__`` / ``__setitem__`` / ``__delitem__``; everything
stays in memory until the commit like any other edit.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, MutableMapping
from typing import TYPE_CHECKING, Any

import h5py

__all__ = ["GroupAPI"]


class GroupAPI(MutableMapping):
    """Mixin of :class:`~xarray_vhdf5._wrappers.group.InMemoryGroup`: h5py's Group conveniences.

    Groups compare and hash by identity, as h5py's do (a ``Mapping`` would
    compare members).
    """

    name: str
    _root: Any
    __eq__ = object.__eq__
    __hash__ = object.__hash__

    if TYPE_CHECKING:  # defined by InMemoryGroup

        def create_dataset(self, *args: Any, **kwds: Any) -> Any: ...

        def visit(self, func: Callable[[str], Any]) -> Any: ...

        def visititems(self, func: Callable[[str, Any], Any]) -> Any: ...

    @property
    def parent(self):
        """The group holding this one (the version's root is its own parent, as h5py's ``/``).

        Raises
        ------
        KeyError
            The group was removed from the staged tree.
        ReadOnlyError
            The staged version was committed or discarded.
        """
        head = posixpath.dirname(self.name)
        return self._root if not head else self._root[head]

    @property
    def versioned_root(self):
        """The staged version's root group (versioned-hdf5's attribute)."""
        return self._root

    @property
    def file(self) -> h5py.File | None:
        """The h5py file the version is staged in (None for a group made outside ``stage_version``)."""
        where = getattr(self._root, "h5file", None)
        return None if where is None else where.file

    def create_dataset_like(self, name: str, other, **kwupdate):
        """Create a dataset shaped like ``other`` (h5py's ``create_dataset_like``).

        Shape, dtype, chunks, filters (compression, compression_opts,
        scaleoffset, shuffle, fletcher32), fill value and, when it differs from
        the shape, maxshape are taken from ``other`` unless given in
        ``kwupdate``; no data is copied: the new dataset is sparse (all fill
        value) until written, as versioned-hdf5's.

        Parameters
        ----------
        name : str
            Path of the new dataset, relative to this group.
        other : staged dataset or h5py.Dataset
            The dataset to take the properties from (any file).
        **kwupdate
            Keywords of :meth:`create_dataset` overriding ``other``'s.

        Raises
        ------
        ValueError, IncompatibleDataError, UnsupportedError
            As :meth:`create_dataset` raises them.
        """
        for key in (
            "shape",
            "dtype",
            "chunks",
            "compression",
            "compression_opts",
            "scaleoffset",
            "shuffle",
            "fletcher32",
            "fillvalue",
        ):
            kwupdate.setdefault(key, getattr(other, key))
        if tuple(other.maxshape) != tuple(other.shape):
            kwupdate.setdefault("maxshape", other.maxshape)
        return self.create_dataset(name, **kwupdate)

    def visit_links(self, func: Callable[[str], Any]) -> Any:
        """:meth:`visit` (a staged tree holds no soft or external links)."""
        return self.visit(func)

    def visititems_links(self, func: Callable[[str, Any], Any]) -> Any:
        """:meth:`visititems` (a staged tree holds no soft or external links)."""
        return self.visititems(func)
