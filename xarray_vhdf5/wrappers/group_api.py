"""The parts of h5py's ``Group`` API a staged group adds on top of its own (versioned-hdf5 parity).

versioned-hdf5's ``InMemoryGroup`` subclasses ``h5py.Group`` and so answers
``parent``, ``file``, the ``MutableMapping`` methods (``pop``, ``popitem``,
``setdefault``, ``update``, ``clear``) and ``visit_links`` / ``visititems_links``
(h5py 3.11). :class:`GroupAPI` gives a staged group the same: the mapping
methods are ``collections.abc.MutableMapping``'s (as h5py's are) over the
group's own ``__getitem__`` / ``__setitem__`` / ``__delitem__``; everything
stays in memory until the commit like any other edit.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, MutableMapping
from typing import Any

import h5py

__all__ = ["GroupAPI"]


class GroupAPI(MutableMapping):
    """Mixin of :class:`~xarray_vhdf5.wrappers.group.InMemoryGroup`: h5py's Group conveniences.

    Groups compare and hash by identity, as h5py's do (a ``Mapping`` would
    compare members).
    """

    name: str
    _root: Any
    __eq__ = object.__eq__
    __hash__ = object.__hash__

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

    def visit_links(self, func: Callable[[str], Any]) -> Any:
        """:meth:`visit` (a staged tree holds no soft or external links)."""
        return self.visit(func)

    def visititems_links(self, func: Callable[[str, Any], Any]) -> Any:
        """:meth:`visititems` (a staged tree holds no soft or external links)."""
        return self.visititems(func)
