"""Read-only views of a committed version: its group tree and datasets.

HDF5 has no read-only datasets, and a version's virtual datasets share their
chunks with every other version, so writing through h5py would corrupt history
(``docs/design.md``, "Layers"). These wrappers read through h5py and
refuse every write with :class:`~xarray_vhdf5.errors.ReadOnlyError`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import h5py
import numpy as np

from .._backend.hashing import is_vlen_string_dtype
from .._backend.layout import split_version_path
from .._backend.raw_data import reported_fillvalue
from ..errors import ReadOnlyError
from .attrs import ReadOnlyAttrs
from .closed import closed_file_error
from .closed import reads_file as _reads_file
from .dataset_api import chunk_slices, empty_selection

__all__ = ["VersionDataset", "VersionGroup"]

_HINT = "committed versions are read-only; stage a new version with VersionedHDF5File.stage_version()"


def _same_hdf5_object(wrapper, other) -> bool:
    """h5py's ``HLObject.__eq__``: objects with an ``id`` are equal when their HDF5 objects are."""
    if not hasattr(other, "id"):
        return NotImplemented
    return wrapper.id == other.id


class VersionDataset:
    """A dataset of a committed version (wraps its virtual dataset, read-only).

    Indexing reads through HDF5's virtual dataset: only the chunks the
    selection touches are read from raw_data.

    Parameters
    ----------
    dataset : h5py.Dataset
        The version's virtual dataset.
    version : str, optional
        The version's name (for error messages).

    Raises
    ------
    ClosedFileError
        From every read (points, attributes, shape, ...) once the h5py file was
        closed (h5py raises its own ``RuntimeError``, ``ValueError`` or
        ``KeyError`` then).
    ReadOnlyError
        From every write.
    """

    __slots__ = ("_attrs", "_version", "dataset")

    def __init__(self, dataset: h5py.Dataset, version: str | None = None):
        self.dataset = dataset
        self._attrs: ReadOnlyAttrs | None = None
        self._version = version

    def _raise_if_closed(self) -> None:
        if not self.dataset.id.valid:
            where = f" of version {self._version!r}" if self._version is not None else ""
            raise closed_file_error(f"a dataset{where}") from None

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
    @_reads_file
    def shape(self) -> tuple[int, ...]:
        return self.dataset.shape

    @property
    @_reads_file
    def dtype(self) -> np.dtype:
        return self.dataset.dtype

    @property
    @_reads_file
    def ndim(self) -> int:
        return self.dataset.ndim

    @property
    @_reads_file
    def size(self) -> int:
        return self.dataset.size

    @_reads_file
    def __len__(self) -> int:
        return len(self.dataset)

    @property
    @_reads_file
    def chunks(self) -> tuple[int, ...]:
        """Chunk shape in points (the unit of deduplication)."""
        return tuple(int(c) for c in self.dataset.attrs["chunks"])

    @property
    @_reads_file
    def raw_data(self) -> h5py.Dataset:
        """The dataset's raw_data (shared by all versions)."""
        return self.dataset.file[self.dataset.attrs["raw_data"]]

    @property
    @_reads_file
    def fillvalue(self):
        """As h5py reports it: raw_data's, ``b""`` for variable-length strings.

        See :func:`~xarray_vhdf5._backend.raw_data.reported_fillvalue`.
        """
        return reported_fillvalue(self.dtype, None if is_vlen_string_dtype(self.dtype) else self.raw_data.fillvalue)

    @property
    @_reads_file
    def compression(self):
        return self.raw_data.compression

    @property
    @_reads_file
    def compression_opts(self):
        return self.raw_data.compression_opts

    @property
    @_reads_file
    def maxshape(self) -> tuple[int, ...]:
        return self.dataset.maxshape

    @property
    @_reads_file
    def shuffle(self) -> bool:
        return self.raw_data.shuffle

    @property
    @_reads_file
    def fletcher32(self) -> bool:
        return self.raw_data.fletcher32

    @property
    @_reads_file
    def scaleoffset(self):
        return self.raw_data.scaleoffset

    @property
    @_reads_file
    def nbytes(self) -> int:
        """Size of the points in memory, in bytes (h5py's ``nbytes``)."""
        return self.dataset.nbytes

    @property
    @_reads_file
    def file(self) -> h5py.File:
        return self.dataset.file

    @property
    @_reads_file
    def parent(self) -> VersionGroup:
        """The group holding this dataset, in the same version (read-only)."""
        found = split_version_path(self.dataset.name)
        assert found is not None, "a version's dataset"
        return VersionGroup(self.dataset.parent, found[1])

    @property
    def id(self):
        """The h5py low-level id of the version's virtual dataset."""
        return self.dataset.id

    def __eq__(self, other) -> bool:
        """Equal to what wraps, or is, the same HDF5 object (h5py's rule).

        ``vf["v1"]["x"] == vf["v1"]["x"]``, and equal to the h5py dataset it
        wraps (``.dataset``), as h5py's objects and versioned-hdf5 2.6's are:
        ``self.id == other.id`` for anything with an ``id``, else
        ``NotImplemented`` (so ``ds == array`` is numpy's elementwise comparison).
        """
        return _same_hdf5_object(self, other)

    def __hash__(self) -> int:
        """The h5py object's hash (``hash(self) == hash(self.dataset)``).

        Raises
        ------
        TypeError
            The file was closed before the dataset was first hashed (h5py's rule).
        """
        return hash(self.id)

    @property
    @_reads_file
    def ref(self) -> h5py.Reference:
        """An HDF5 object reference to the version's virtual dataset (h5py's ``ref``)."""
        return self.dataset.ref

    @property
    @_reads_file
    def is_virtual(self) -> bool:
        return self.dataset.is_virtual

    @_reads_file
    def virtual_sources(self):
        """The virtual dataset's mappings (h5py's ``virtual_sources()``)."""
        return self.dataset.virtual_sources()

    @_reads_file
    def len(self) -> int:
        """Length of the first axis (h5py's ``len()``)."""
        return self.dataset.len()

    def __iter__(self):
        """Iterate over the first axis, as h5py datasets do."""
        for i in range(len(self)):
            yield self[i]

    def __getitem__(self, index):
        """``ds[index]``: h5py's read of the version's virtual dataset.

        A selection of no point (``ds[3:3]``, ``ds[[]]``) returns an empty
        array of its shape, as h5py does for other datasets (libhdf5 fails
        such reads of a virtual dataset with many mappings).

        Raises
        ------
        ClosedFileError
            The file was closed.
        IndexError, TypeError, ValueError
            Where h5py raises them (a bad index).
        """
        try:
            return self.dataset[index]
        except (OSError, RuntimeError):  # libhdf5 failed (h5py's index errors are not these)
            self._raise_if_closed()
            empty = empty_selection(self.shape, self.dtype, index)
            if empty is None:
                raise
            return empty

    def __array__(self, dtype=None, copy=None):
        arr = self[()]
        return arr if dtype is None else arr.astype(dtype)

    @_reads_file
    def asstr(self, *args, **kwargs):
        """h5py's ``asstr()`` view for variable-length string datasets."""
        return self.dataset.asstr(*args, **kwargs)

    @_reads_file
    def astype(self, dtype):
        """h5py's ``astype()`` view: ``ds.astype("f4")[sel]`` reads converted points."""
        return self.dataset.astype(dtype)

    @_reads_file
    def fields(self, names):
        """h5py's ``fields()`` view of a compound dataset."""
        return self.dataset.fields(names)

    @_reads_file
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
        if not self.dataset.id.valid:
            return "<Closed VersionDataset>"
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

    Raises
    ------
    ClosedFileError
        From every read (members, attributes, names, ...) once the h5py file
        was closed.
    ReadOnlyError
        From every write.
    """

    __slots__ = ("_attrs", "_group", "_parent", "_path", "version")

    def __init__(
        self, group: h5py.Group | None, version: str, *, parent: h5py.Group | None = None, path: str | None = None
    ):
        if group is None and (parent is None or path is None):
            raise TypeError("VersionGroup needs a group, or a parent group and a path")
        self._group = group
        self.version = version
        self._attrs: ReadOnlyAttrs | None = None
        self._parent: Any = parent  # with _path: where to open the group on first use
        self._path = path

    @property
    def _held(self) -> h5py.Group:
        """The h5py group it holds: its own once opened, else its parent (see ``group``)."""
        return self._group if self._group is not None else self._parent

    def _raise_if_closed(self) -> None:
        if not self._held.id.valid:
            raise closed_file_error(f"version {self.version!r}") from None

    @property
    @_reads_file
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
    @_reads_file
    def name(self) -> str:
        if self._group is None:
            return f"{self._parent.name.rstrip('/')}/{self._path}"
        return self._group.name

    def __getitem__(self, path: str):
        try:
            if self._group is None and isinstance(path, str) and path and not path.startswith("/"):
                item = self._parent[f"{self._path}/{path}"]
            else:
                item = self.group[path]
        except Exception as exc:  # nothing asked before h5py fails
            self._raise_if_closed()
            if not isinstance(exc, KeyError):
                raise
            raise KeyError(f"no dataset or group {path!r} in version {self.version!r} ({self.name})") from None
        if isinstance(item, h5py.Group):
            return VersionGroup(item, self.version)
        return VersionDataset(item, self.version)

    def get(self, path: str, default=None):
        return self[path] if path in self else default

    @property
    def file(self) -> h5py.File:
        return self.group.file

    def _root_name(self) -> str:
        """Path of the version's own group (``.../_version_data/versions/<version>``, at any depth)."""
        found = split_version_path(self.name)
        assert found is not None, "a version's group"
        return found[0]

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

    def __eq__(self, other) -> bool:
        """Equal to what wraps, or is, the same HDF5 group (h5py's rule).

        ``vf["v1"] == vf["v1"]``, ``vf[timestamp] == vf["v1"]`` and
        ``vf["v1"] == f["_version_data/versions/v1"]``, as h5py's objects and
        versioned-hdf5 2.6's are: ``self.id == other.id`` for anything with an
        ``id``, else ``NotImplemented``.

        Raises
        ------
        ClosedFileError
            The file was closed before this group was first read (it is opened
            on first use; see the class docstring).
        """
        return _same_hdf5_object(self, other)

    def __hash__(self) -> int:
        """The h5py group's hash (``hash(vf["v1"]) == hash(vf["v1"].group)``).

        Raises
        ------
        ClosedFileError
            The file was closed before this group was first read.
        TypeError
            The file was closed before the group was first hashed (h5py's rule).
        """
        return hash(self.id)

    @property
    @_reads_file
    def ref(self) -> h5py.Reference:
        """An HDF5 object reference to the version's group (h5py's ``ref``)."""
        return self.group.ref

    @_reads_file
    def __contains__(self, path: object) -> bool:
        """Whether ``path`` names a member (relative, or absolute in the file as versioned-hdf5 takes it).

        An absolute path (``"/_version_data/versions/v1/grp"``) is looked up
        only inside this group: one outside it (another version's) is not a
        member, as in versioned-hdf5 (h5py would look it up from the file's root).

        Raises
        ------
        ClosedFileError
            The file is closed.
        """
        if isinstance(path, str) and path.startswith("/"):
            own = self.name.rstrip("/") + "/"
            if path.rstrip("/") + "/" == own:
                self._raise_if_closed()
                return True
            if not path.startswith(own):
                self._raise_if_closed()
                return False
            path = path[len(own) :]
        found = path in self.group
        if not found:
            self._raise_if_closed()  # h5py answers False for a closed group
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    @_reads_file
    def __len__(self) -> int:
        return len(self.group)

    def __bool__(self) -> bool:
        """True while its file is open, even for an empty version (h5py's rule, not ``len``)."""
        return bool(self._held.id.valid)

    @_reads_file
    def keys(self):
        return list(self.group.keys())

    def values(self):
        return [self[k] for k in self.keys()]

    def items(self):
        return [(k, self[k]) for k in self.keys()]

    @_reads_file
    def visititems(self, func):
        def wrapped(path, obj):
            if isinstance(obj, h5py.Group):
                return func(path, VersionGroup(obj, self.version))
            return func(path, VersionDataset(obj, self.version))

        return self.group.visititems(wrapped)

    @_reads_file
    def visit(self, func):
        return self.group.visit(func)

    @_reads_file
    def visit_links(self, func):
        """h5py's ``visit_links``: ``func(path)`` for every link below the group, until it returns non-None."""
        return self.group.visit_links(func)

    @_reads_file
    def visititems_links(self, func):
        """h5py's ``visititems_links``: ``func(path, link)`` for every link below the group (``h5py.HardLink`` etc.)."""
        return self.group.visititems_links(func)

    @_reads_file
    def datasets(self) -> dict[str, VersionDataset]:
        """Every dataset below the group, by path relative to it (versioned-hdf5's ``datasets()``)."""
        found: dict[str, VersionDataset] = {}

        def collect(path, obj):
            if isinstance(obj, h5py.Dataset):
                found[path] = VersionDataset(obj, self.version)

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
        if not self._held.id.valid:
            return f"<Closed VersionGroup of version {self.version!r}>"
        return f"<VersionGroup {self.name!r} of version {self.version!r} (read-only)>"
