"""The parts of h5py's ``Group`` API a staged group adds on top of its own (versioned-hdf5 parity).

versioned-hdf5's ``InMemoryGroup`` subclasses ``h5py.Group`` and so answers
``parent``, ``file``, the ``MutableMapping`` methods (``pop``, ``popitem``,
``setdefault``, ``update``, ``clear``) and ``visit_links`` / ``visititems_links``
(h5py 3.11). :class:`GroupAPI` gives a staged group the same, built on its own
``__getitem__`` / ``__setitem__`` / ``__delitem__`` / ``visit``; everything
stays in memory until the commit like any other edit.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import h5py

__all__ = ["GroupAPI"]

_MISSING = object()


class GroupAPI:
    """Mixin of :class:`~xarray_vhdf5.wrappers.group.InMemoryGroup`: h5py's Group conveniences."""

    name: str
    _root: Any

    @property
    def parent(self):
        """The group holding this one (the version's root is its own parent, as h5py's ``/``)."""
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

    def pop(self, path: str, default: Any = _MISSING) -> Any:
        """Remove ``path`` and return it (``default`` when absent; KeyError without one)."""
        try:
            obj = self[path]
        except KeyError:
            if default is _MISSING:
                raise
            return default
        del self[path]
        return obj

    def popitem(self) -> tuple[str, Any]:
        """Remove and return the first ``(name, object)`` member; KeyError when empty."""
        for name in self:
            return name, self.pop(name)
        raise KeyError(f"staged group {self.name or '/'!r} is empty")

    def setdefault(self, path: str, default: Any = None) -> Any:
        """``self[path]``, after ``self[path] = default`` when absent."""
        if path not in self:
            self[path] = default
        return self[path]

    def update(self, other: Mapping | Iterable[tuple[str, Any]] = (), **kwargs: Any) -> None:
        """``self[name] = value`` for each pair of ``other`` and ``kwargs`` (``dict.update``)."""
        pairs = other.items() if isinstance(other, Mapping) else other
        for path, value in list(pairs) + list(kwargs.items()):
            self[path] = value

    def clear(self) -> None:
        """Remove every member."""
        for name in list(self):
            del self[name]

    def visit_links(self, func: Callable[[str], Any]) -> Any:
        """:meth:`visit` (a staged tree holds no soft or external links)."""
        return self.visit(func)

    def visititems_links(self, func: Callable[[str, Any], Any]) -> Any:
        """:meth:`visititems` (a staged tree holds no soft or external links)."""
        return self.visititems(func)
