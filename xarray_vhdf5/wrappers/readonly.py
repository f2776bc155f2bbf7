"""Read-only views of a committed version: its group tree and datasets.

HDF5 has no read-only datasets, and a version's virtual datasets share their
chunks with every other version, so writing through h5py would corrupt history
(seed ``design.txt``, "h5py Wrappers"). These wrappers read through h5py and
refuse every write with :class:`~xarray_vhdf5.errors.ReadOnlyError`.
"""

from __future__ import annotations

from collections.abc import Iterator

import h5py
import numpy as np

from ..backend.hashing import is_vlen_string_dtype
from ..backend.layout import split_version_path
from ..backend.raw_data import reported_fillvalue
from ..errors import ReadOnlyError
from .attrs import ReadOnlyAttrs
from .dataset_api import chunk_slices

__all__ = ["VersionGroup", "VersionDataset"]

_HINT = "committed versions are read-only; stage a new version with VersionedHDF5File.stage_version()"


class VersionDataset:
    """A dataset of a committed version (wraps its virtual dataset, read-only).

    Indexing reads through HDF5's virtual dataset: only the chunks the
    selection touches are read from raw_data.
    """

    __slots__ = ("dataset", "_attrs")

    def __init__(self, dataset: h5py.Dataset):
        self.dataset = dataset
        self._attrs = None

    @property
    def attrs(self) -> ReadOnlyAttrs:
        """The dataset's attributes, read-only."""
        if self._attrs is None:
            self._attrs = ReadOnlyAttrs(self.dataset.attrs)
        return self._attrs

    @property
    def name(self) -> str:
        return self.dataset.name

    @property
    def shape(self) -> tuple[int, ...]:
        return self.dataset.shape

    @property
    def dtype(self) -> np.dtype:
        return self.dataset.dtype

    @property
    def ndim(self) -> int:
        return self.dataset.ndim

    @property
    def size(self) -> int:
        return self.dataset.size

    def __len__(self) -> int:
        return len(self.dataset)

    @property
    def chunks(self) -> tuple[int, ...]:
        """Chunk shape in points (the unit of deduplication)."""
        return tuple(int(c) for c in self.dataset.attrs["chunks"])

    @property
    def raw_data(self) -> h5py.Dataset:
        """The dataset's raw_data (shared by all versions)."""
        return self.dataset.file[self.dataset.attrs["raw_data"]]

    @property
    def fillvalue(self):
        """As h5py reports it: raw_data's, ``b""`` for variable-length strings (:func:`~xarray_vhdf5.backend.raw_data.reported_fillvalue`)."""
        return reported_fillvalue(self.dtype, None if is_vlen_string_dtype(self.dtype) else self.raw_data.fillvalue)

    @property
    def compression(self):
        return self.raw_data.compression

    @property
    def compression_opts(self):
        return self.raw_data.compression_opts

    @property
    def maxshape(self) -> tuple[int, ...]:
        return self.dataset.maxshape

    @property
    def shuffle(self) -> bool:
        return self.raw_data.shuffle

    @property
    def fletcher32(self) -> bool:
        return self.raw_data.fletcher32

    @property
    def scaleoffset(self):
        return self.raw_data.scaleoffset

    @property
    def nbytes(self) -> int:
        """Size of the points in memory, in bytes (h5py's ``nbytes``)."""
        return self.dataset.nbytes

    @property
    def file(self) -> h5py.File:
        return self.dataset.file

    @property
    def parent(self) -> VersionGroup:
        """The group holding this dataset, in the same version (read-only)."""
        _root, version = split_version_path(self.dataset.name)
        return VersionGroup(self.dataset.parent, version)

    @property
    def id(self):
        """The h5py low-level id of the version's virtual dataset."""
        return self.dataset.id

    @property
    def ref(self) -> h5py.Reference:
        """An HDF5 object reference to the version's virtual dataset (h5py's ``ref``)."""
        return self.dataset.ref

    @property
    def is_virtual(self) -> bool:
        return self.dataset.is_virtual

    def virtual_sources(self):
        """The virtual dataset's mappings (h5py's ``virtual_sources()``)."""
        return self.dataset.virtual_sources()

    def len(self) -> int:
        """Length of the first axis (h5py's ``len()``)."""
        return self.dataset.len()

    def __iter__(self):
        """Iterate over the first axis, as h5py datasets do."""
        return iter(self.dataset)

    def __getitem__(self, index):
        return self.dataset[index]

    def __array__(self, dtype=None, copy=None):
        arr = self.dataset[()]
        return arr if dtype is None else arr.astype(dtype)

    def asstr(self, *args, **kwargs):
        """h5py's ``asstr()`` view for variable-length string datasets."""
        return self.dataset.asstr(*args, **kwargs)

    def astype(self, dtype):
        """h5py's ``astype()`` view: ``ds.astype("f4")[sel]`` reads converted points."""
        return self.dataset.astype(dtype)

    def fields(self, names):
        """h5py's ``fields()`` view of a compound dataset."""
        return self.dataset.fields(names)

    def read_direct(self, dest, source_sel=None, dest_sel=None) -> None:
        """Read into an existing numpy array (h5py's ``read_direct``)."""
        self.dataset.read_direct(dest, source_sel, dest_sel)

    def iter_chunks(self, sel=None):
        """Slices of the dataset's chunks meeting ``sel`` (h5py's ``iter_chunks``).

        Over ``chunks``, the unit of deduplication (the virtual dataset itself
        has no chunks). See :func:`.dataset_api.chunk_slices`.
        """
        return chunk_slices(self.shape, self.chunks, sel)

    def __setitem__(self, index, value):
        raise ReadOnlyError(f"cannot write to {self.name!r}: {_HINT}")

    def resize(self, *args, **kwargs):
        raise ReadOnlyError(f"cannot resize {self.name!r}: {_HINT}")

    def write_direct(self, *args, **kwargs):
        raise ReadOnlyError(f"cannot write to {self.name!r}: {_HINT}")

    def __repr__(self) -> str:
        return f"<VersionDataset {self.name!r}: shape {self.shape}, type {self.dtype.str!r} (read-only)>"


class VersionGroup:
    """A group of a committed version (the version's root or a subgroup), read-only.

    Parameters
    ----------
    group : h5py.Group or None
        The version's group (or subgroup). None with ``parent`` and ``path``: the
        group is opened only when something of its own is asked (attrs, listing);
        ``version_group["x"]`` then opens ``x`` straight from ``parent``, one HDF5
        object open per read instead of two.
    version : str
        The version's name.
    """

    __slots__ = ("_group", "version", "_attrs", "_parent", "_path")

    def __init__(self, group: h5py.Group | None, version: str, *, parent: h5py.Group | None = None,
                 path: str | None = None):
        if group is None and (parent is None or path is None):
            raise TypeError("VersionGroup needs a group, or a parent group and a path")
        self._group = group
        self.version = version
        self._attrs = None
        self._parent = parent
        self._path = path

    @property
    def group(self) -> h5py.Group:
        """The h5py group (opened on first use)."""
        if self._group is None:
            self._group = self._parent[self._path]
        return self._group

    @property
    def attrs(self) -> ReadOnlyAttrs:
        """The group's attributes (for a version's root: the version's attrs), read-only."""
        if self._attrs is None:
            self._attrs = ReadOnlyAttrs(self.group.attrs)
        return self._attrs

    @property
    def name(self) -> str:
        if self._group is None:
            return f"{self._parent.name.rstrip('/')}/{self._path}"
        return self._group.name

    def __getitem__(self, path: str):
        try:
            if self._group is None and isinstance(path, str) and path and not path.startswith("/"):
                item = self._parent[f"{self._path}/{path}"]
            else:
                item = self._group[path]
        except KeyError:
            raise KeyError(
                f"no dataset or group {path!r} in version {self.version!r} ({self.name})"
            ) from None
        if isinstance(item, h5py.Group):
            return VersionGroup(item, self.version)
        return VersionDataset(item)

    def get(self, path: str, default=None):
        return self[path] if path in self.group else default

    @property
    def file(self) -> h5py.File:
        return self.group.file

    def _root_name(self) -> str:
        """Path of the version's own group (``.../_version_data/versions/<version>``, at any depth)."""
        return split_version_path(self.name)[0]

    @property
    def parent(self) -> VersionGroup:
        """The parent group in the same version (the version's root is its own parent)."""
        if self.name == self._root_name():
            return self
        return VersionGroup(self.group.parent, self.version)

    @property
    def id(self):
        """The h5py low-level id of the group."""
        return self.group.id

    @property
    def ref(self) -> h5py.Reference:
        """An HDF5 object reference to the version's group (h5py's ``ref``)."""
        return self.group.ref

    def __contains__(self, path: object) -> bool:
        return path in self.group

    def __iter__(self) -> Iterator[str]:
        return iter(self.group)

    def __len__(self) -> int:
        return len(self.group)

    def keys(self):
        return list(self.group.keys())

    def values(self):
        return [self[k] for k in self.group]

    def items(self):
        return [(k, self[k]) for k in self.group]

    def visititems(self, func):
        def wrapped(path, obj):
            return func(path, VersionGroup(obj, self.version) if isinstance(obj, h5py.Group) else VersionDataset(obj))

        return self.group.visititems(wrapped)

    def visit(self, func):
        return self.group.visit(func)

    def visit_links(self, func):
        """h5py's ``visit_links``: ``func(path)`` for every link below the group, until it returns non-None."""
        return self.group.visit_links(func)

    def visititems_links(self, func):
        """h5py's ``visititems_links``: ``func(path, link)`` for every link below the group (``h5py.HardLink`` etc.)."""
        return self.group.visititems_links(func)

    def datasets(self) -> dict[str, VersionDataset]:
        """Every dataset below the group, by path relative to it (versioned-hdf5's ``datasets()``)."""
        found: dict[str, VersionDataset] = {}

        def collect(path, obj):
            if isinstance(obj, h5py.Dataset):
                found[path] = VersionDataset(obj)

        self.group.visititems(collect)
        return found

    @property
    def versioned_root(self) -> VersionGroup:
        """The version's root group (versioned-hdf5's ``versioned_root``)."""
        root = self._root_name()
        return self if self.name == root else VersionGroup(self.group.file[root], self.version)

    def close(self) -> None:
        """Does nothing: a committed version is read-only already.

        versioned-hdf5's ``InMemoryGroup.close()`` marks a group committed;
        kept so that code calling it on a committed version keeps working.
        """

    def _refuse(self, *args, **kwargs):
        raise ReadOnlyError(f"cannot modify version {self.version!r}: {_HINT}")

    __setitem__ = __delitem__ = create_dataset = create_group = require_dataset = _refuse
    require_group = move = copy = clear = pop = popitem = setdefault = update = _refuse
    create_dataset_like = create_virtual_dataset = build_virtual_dataset = _refuse

    def __repr__(self) -> str:
        return f"<VersionGroup {self.name!r} of version {self.version!r} (read-only)>"
