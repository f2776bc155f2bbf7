"""A committed version's group tree as a shared reader returns it: a snapshot, read-only.

:class:`_Tree` reads a version's groups once (names, kinds, attributes) through
one fresh handle; :class:`SharedVersionGroup` and :class:`SharedAttrs` present
it with h5py's interface. Made by :class:`~xarray_vhdf5._versions.reader.SharedVersionedFile`
(see :mod:`~xarray_vhdf5._versions.reader` for the locking).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import h5py
import numpy as np
from h5py import h5o

from .._backend.h5attrs import UNREAD, object_attrs
from .._backend.h5objects import walk_links
from .._backend.layout import version_path
from ..errors import ReadOnlyError, VersionNotFoundError

if TYPE_CHECKING:  # for annotations only: the reader module imports this one
    from .reader import SharedVersionedFile
    from .reader_dataset import SharedVersionDataset

__all__ = ["SharedAttrs", "SharedVersionGroup"]

_HINT = "VersionedHDF5File.open() reads versioned HDF5 files only"
_READ_ONLY = (
    "opened for reading with VersionedHDF5File.open(); stage, commit and delete through "
    "VersionedHDF5File(xarray_vhdf5.open_file(path))"
)


class SharedAttrs(Mapping):
    """Attributes of a committed object as read when the object was made; never writable.

    The names and values ``ReadOnlyAttrs`` of a committed version shows (the
    format's ``raw_data``/``chunks`` on datasets, ``prev_version``,
    ``committed`` and ``timestamp`` on a version's group, and the user's).
    Array values are returned as copies.

    Parameters
    ----------
    values : dict
        Name -> value; a value :data:`~xarray_vhdf5._backend.h5attrs.UNREAD`
        is read by ``read`` when first asked for.
    read : callable, optional
        ``read(name)``: the value of an attribute left unread (the object's,
        which keeps it in ``values``).

    Raises
    ------
    ReadOnlyError
        From every write (``attrs[k] = v``, ``del``, ``create``, ``modify``).
    """

    __slots__ = ("_read", "_values")

    def __init__(self, values: dict[str, Any], read: Callable[[str], Any] | None = None):
        self._values = values
        self._read = read

    def __getitem__(self, key: str) -> Any:
        value = self._values[key]
        if value is UNREAD:
            assert self._read is not None, "an unread value comes with its reader"
            value = self._read(key)
        return value.copy() if isinstance(value, np.ndarray) else value

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def __setitem__(self, key, value):
        raise ReadOnlyError(f"cannot set attribute {key!r}: committed versions are read-only; {_READ_ONLY}")

    def __delitem__(self, key):
        raise ReadOnlyError(f"cannot delete attribute {key!r}: committed versions are read-only")

    def modify(self, key, value):
        """Refused as ``attrs[key] = value`` is."""
        self[key] = value

    def create(self, key, data, shape=None, dtype=None):
        """Refused as ``attrs[key] = value`` is."""
        self[key] = data

    def __repr__(self) -> str:
        return f"<SharedAttrs {self._values!r}>"


def _group_attrs(group: h5py.Group) -> dict[str, Any]:
    """``dict(group.attrs)``: h5py's values, in h5py's order (creation order when the group
    tracks it, else by name), read by index (:func:`~xarray_vhdf5._backend.h5attrs.object_attrs`)."""
    return object_attrs(group)


class _Tree:
    """The groups of one version, read once: paths (h5py's ``visit`` order), kinds, members, attributes.

    Paths are relative to the version's group (``""`` is the group itself).

    Raises
    ------
    VersionNotFoundError
        The version's group is not in the file (deleted since it was listed).
    """

    __slots__ = ("attrs", "kinds", "members", "order", "root", "version")

    def __init__(self, f: h5py.File, version: str):
        group = f.get(version_path(version))
        if not isinstance(group, h5py.Group):
            raise VersionNotFoundError(f"{f.filename!r}: version {version!r} was deleted; open another version")
        self.version, self.root = version, group.name
        self.order: list[str] = []
        self.kinds: dict[str, str] = {"": "group"}
        self.members: dict[str, list[str]] = {}
        self.attrs: dict[str, dict] = {}
        # Walked by links (walk_links: h5py's ``visit`` order, no dataset opened): h5py's
        # ``visit`` and ``get(getclass=True)`` ask for every field of each object, which
        # decodes a virtual dataset's mappings, all of them.
        self._group("", group)
        for member, kind in walk_links(group.id):
            self.order.append(member)
            if kind == h5o.TYPE_GROUP:
                self.kinds[member] = "group"
                self._group(member, group[member])
            else:
                self.kinds[member] = "dataset"

    def _group(self, path: str, sub: h5py.Group) -> None:
        self.members[path] = list(sub.keys())
        self.attrs[path] = _group_attrs(sub)

    def name(self, path: str) -> str:
        """Absolute HDF5 path of ``path``."""
        return f"{self.root}/{path}" if path else self.root

    def below(self, path: str) -> list[str]:
        """Paths under ``path`` in visit order, relative to it."""
        if not path:
            return list(self.order)
        prefix = path + "/"
        return [p[len(prefix) :] for p in self.order if p.startswith(prefix)]


class SharedVersionGroup:
    """A group of a committed version (its root or a subgroup), as read when the version was got.

    Members, their kinds and the attributes of every group of the version are
    a snapshot taken by ``reader[version]``; each dataset is resolved (one
    fresh handle) when it is got from the group.

    Raises
    ------
    ReadOnlyError
        From every write.
    ClosedFileError
        Getting a dataset once the reader is closed.
    """

    __slots__ = ("_path", "_reader", "_tree")

    def __init__(self, reader: SharedVersionedFile, tree: _Tree, path: str = ""):
        self._reader, self._tree, self._path = reader, tree, path

    version = property(lambda self: self._tree.version, doc="The version's name.")
    name = property(lambda self: self._tree.name(self._path), doc="Absolute HDF5 path of the group.")
    attrs = property(
        lambda self: SharedAttrs(self._tree.attrs[self._path]),
        doc="The group's attributes (a version's root: the version's), read-only.",
    )

    def _relative(self, path) -> str:
        """``path`` (relative to this group, or absolute inside the version) relative to the version."""
        if isinstance(path, bytes):
            path = path.decode()
        if not isinstance(path, str):
            raise TypeError(f"members are named by str paths, got {type(path).__name__}")
        if path.startswith("/"):
            root = self._tree.root
            if path.rstrip("/") != root and not path.startswith(root + "/"):
                raise KeyError(f"{path!r} is not in version {self.version!r} ({root})")
            parts = path[len(root) :].split("/")
        else:
            parts = self._path.split("/") + path.split("/")
        return "/".join(p for p in parts if p not in ("", "."))

    def __getitem__(self, path: str):
        """The group or dataset at ``path``; a dataset is resolved now (one fresh handle).

        Raises
        ------
        KeyError
            No such member in the version.
        VersionNotFoundError
            The version was deleted since it was got.
        ClosedFileError
            The reader is closed.
        """
        self._reader._check_open()
        rel = self._relative(path)
        kind = self._tree.kinds.get(rel)
        if kind is None:
            raise KeyError(f"no dataset or group {path!r} in version {self.version!r} ({self.name})")
        if kind == "group":
            return SharedVersionGroup(self._reader, self._tree, rel)
        return self._reader._datasets_of(self._tree, [rel])[0]

    def get(self, path: str, default=None):
        return self[path] if path in self else default

    def __contains__(self, path: object) -> bool:
        try:
            return self._relative(path) in self._tree.kinds
        except (KeyError, TypeError):
            return False

    def group_paths(self) -> list[str]:
        """Paths of this group (``""``) and of every group below it, relative to it, in visit order."""
        prefix = f"{self._path}/" if self._path else ""
        below = [p for p in self._tree.order if p.startswith(prefix) and self._tree.kinds[p] == "group"]
        return [""] + [p[len(prefix) :] for p in below]

    def keys(self) -> list[str]:
        return list(self._tree.members[self._path])

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self._tree.members[self._path])

    def __bool__(self) -> bool:
        """True while the reader is open, even for an empty version (h5py's rule, not ``len``)."""
        return not self._reader.closed

    def _objects(self, rels: list[str]) -> list:
        self._reader._check_open()
        kinds = self._tree.kinds
        datasets = iter(self._reader._datasets_of(self._tree, [r for r in rels if kinds[r] == "dataset"]))
        return [
            SharedVersionGroup(self._reader, self._tree, r) if kinds[r] == "group" else next(datasets) for r in rels
        ]

    def _join(self, name: str) -> str:
        return f"{self._path}/{name}" if self._path else name

    def values(self) -> list:
        """The members, datasets resolved through one fresh handle."""
        return self._objects([self._join(k) for k in self.keys()])

    def items(self) -> list[tuple[str, Any]]:
        keys = self.keys()
        return list(zip(keys, self._objects([self._join(k) for k in keys])))

    def visit(self, func: Callable[[str], Any]):
        """h5py's ``visit``: ``func(path)`` for every object below the group, until it returns non-None."""
        for path in self._tree.below(self._path):
            result = func(path)
            if result is not None:
                return result
        return None

    def visititems(self, func: Callable[[str, Any], Any]):
        """h5py's ``visititems``: ``func(path, object)`` below the group, until it returns non-None.

        Every dataset below is resolved first, through one fresh handle.
        """
        paths = self._tree.below(self._path)
        for path, obj in zip(paths, self._objects([self._join(p) for p in paths])):
            result = func(path, obj)
            if result is not None:
                return result
        return None

    def datasets(self) -> dict[str, SharedVersionDataset]:
        """Every dataset below the group, by path relative to it (versioned-hdf5's ``datasets()``)."""
        paths = [p for p in self._tree.below(self._path) if self._tree.kinds[self._join(p)] == "dataset"]
        return dict(zip(paths, self._objects([self._join(p) for p in paths])))

    @property
    def parent(self) -> SharedVersionGroup:
        """The parent group in the same version (the version's root is its own parent)."""
        if not self._path:
            return self
        return SharedVersionGroup(self._reader, self._tree, self._path.rpartition("/")[0])

    @property
    def versioned_root(self) -> SharedVersionGroup:
        """The version's root group (versioned-hdf5's ``versioned_root``)."""
        return SharedVersionGroup(self._reader, self._tree)

    def close(self) -> None:
        """Does nothing: a committed version is read-only already (versioned-hdf5's ``close()``)."""

    def __eq__(self, other) -> bool:
        if not isinstance(other, SharedVersionGroup):
            return NotImplemented
        return (self._reader.path, self.name) == (other._reader.path, other.name)

    def __hash__(self) -> int:
        return hash((self._reader.path, self.name))

    def _refuse(self, *args, **kwargs):
        raise ReadOnlyError(f"cannot modify version {self.version!r}: {_READ_ONLY}")

    __setitem__ = __delitem__ = create_dataset = create_group = require_dataset = _refuse
    require_group = move = copy = clear = pop = popitem = setdefault = update = _refuse
    create_dataset_like = create_virtual_dataset = build_virtual_dataset = _refuse

    def __repr__(self) -> str:
        return f"<SharedVersionGroup {self.name!r} of version {self.version!r} (read-only, shared)>"
