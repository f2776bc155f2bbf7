"""Read-only views of a committed version: its group tree and datasets.

HDF5 has no read-only datasets, and a version's virtual datasets share their
chunks with every other version, so writing through h5py would corrupt history
(``docs/design.md``, "Layers"). These classes read through h5py and refuse
every write with :class:`~xarray_vhdf5.errors.ReadOnlyError` (a ``ValueError``
and a ``PermissionError``; its message says "committed", as versioned-hdf5
2.6's ``ValueError`` does).

They are what versioned-hdf5 2.6 hands out for a committed version, in every
mode at once: versioned-hdf5 gives a file opened ``"r"`` plain ``h5py.Group`` /
``h5py.Dataset`` objects and one opened for writing its ``InMemoryGroup`` (and
``DatasetWrapper`` over an ``InMemoryDataset``), marked committed. Here
:class:`VersionGroup` is an ``h5py.Group`` and an
:class:`~xarray_vhdf5._wrappers.group.InMemoryGroup`; :class:`VersionDataset`
is an ``h5py.Dataset`` and an :class:`~xarray_vhdf5._wrappers.chunked.InMemoryDataset`
(so a ``DatasetWrapper`` whose ``.dataset`` is itself). Each is bound to the
HDF5 object's own id (no second object is opened); what h5py would write
through, and what the staged classes would stage, is overridden to refuse.
Only the h5py low-level ``id`` is left as libhdf5 gives it.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator
from typing import Any

import h5py
import numpy as np
from h5py import h5d, h5g, h5o

from .._backend.hashing import is_vlen_string_dtype
from .._backend.layout import split_version_path
from .._backend.raw_data import Filters, reported_fillvalue
from .._staging import StagedChangesArray
from ..errors import ReadOnlyError
from .attrs import ReadOnlyAttrs
from .chunked import InMemoryDataset
from .closed import closed_file_error
from .closed import reads_file as _reads_file
from .dataset import InMemoryArrayDataset
from .dataset_api import chunk_slices, empty_selection
from .group import InMemoryGroup

__all__ = ["VersionArrayDataset", "VersionDataset", "VersionGroup"]

_HINT = "committed versions are read-only; stage a new version with VersionedHDF5File.stage_version()"


class VersionDataset(h5py.Dataset, InMemoryDataset):
    """A dataset of a committed version (its virtual dataset, read-only).

    An ``h5py.Dataset`` bound to the version's virtual dataset, and an
    :class:`~xarray_vhdf5._wrappers.chunked.InMemoryDataset` (versioned-hdf5
    2.6's ``DatasetWrapper`` of one, committed): ``ds.dataset`` is ``ds``.
    Indexing reads through HDF5's virtual dataset: only the chunks the
    selection touches are read from raw_data.

    Parameters
    ----------
    dataset : h5py.Dataset or h5py.h5d.DatasetID
        The version's virtual dataset (its id is shared, nothing is opened).
    version : str, optional
        The version's name (for error messages).

    Raises
    ------
    ClosedFileError
        From every read (points, attributes, shape, ...) once the h5py file was
        closed (h5py raises its own ``RuntimeError``, ``ValueError`` or
        ``KeyError`` then).
    ReadOnlyError
        From every write: points, ``resize``, ``write_direct``, attributes,
        dimension scales, the staged array.
    """

    def __init__(self, dataset: h5py.Dataset | h5d.DatasetID, version: str | None = None):
        # readonly: h5py then keeps the shape and its reader between reads, as for a file
        # opened "r"; a committed version's virtual dataset never changes.
        h5py.Dataset.__init__(self, dataset.id if isinstance(dataset, h5py.Dataset) else dataset, readonly=True)
        self._attrs: ReadOnlyAttrs | None = None
        self._version = version

    def _raise_if_closed(self) -> None:
        if not self.id.valid:
            where = f" of version {self._version!r}" if self._version is not None else ""
            raise closed_file_error(f"a dataset{where}") from None

    def _check_open(self) -> None:
        """Refuse every edit (the staged classes' check before one)."""
        raise ReadOnlyError(f"cannot modify {self.name!r}: {_HINT}")

    @property
    def dataset(self) -> VersionDataset:
        """The dataset itself (versioned-hdf5's ``DatasetWrapper.dataset``; once the h5py object it wrapped)."""
        return self

    @property  # type: ignore[override]  # a staged dataset's are StagedAttrs
    def attrs(self) -> ReadOnlyAttrs:
        """The dataset's attributes, read-only."""
        if self._attrs is None:
            self._attrs = ReadOnlyAttrs(super().attrs)
        return self._attrs

    @attrs.setter
    def attrs(self, value) -> None:
        raise ReadOnlyError(f"cannot replace the attributes of {self.name!r}: {_HINT}")

    @property
    @_reads_file
    def shape(self) -> tuple[int, ...]:
        if not self.id.valid:  # h5py would answer from its cache
            self._raise_if_closed()
        return super().shape

    @property
    @_reads_file
    def dtype(self) -> np.dtype:
        return super().dtype

    @property
    @_reads_file
    def ndim(self) -> int:
        return super().ndim

    @property
    @_reads_file
    def size(self) -> int:
        if not self.id.valid:  # h5py would answer from its cache
            self._raise_if_closed()
        return super().size

    @_reads_file
    def __len__(self) -> int:
        return super().__len__()

    @property
    @_reads_file
    def chunks(self) -> tuple[int, ...]:
        """Chunk shape in points (the unit of deduplication; the virtual dataset itself has none)."""
        return tuple(int(c) for c in super().attrs["chunks"])

    @chunks.setter
    def chunks(self, value) -> None:
        raise ReadOnlyError(f"cannot set chunks of {self.name!r}: {_HINT}")

    @property
    @_reads_file
    def raw_data(self) -> h5py.Dataset:
        """The dataset's raw_data (shared by all versions)."""
        return self.file[super().attrs["raw_data"]]

    @raw_data.setter
    def raw_data(self, value) -> None:
        raise ReadOnlyError(f"cannot set raw_data of {self.name!r}: {_HINT}")

    @property
    @_reads_file
    def storage_fill(self):
        """raw_data's fill value (None for variable-length strings, which store none)."""
        return None if is_vlen_string_dtype(self.dtype) else self.raw_data.fillvalue

    @storage_fill.setter
    def storage_fill(self, value) -> None:
        raise ReadOnlyError(f"cannot set storage_fill of {self.name!r}: {_HINT}")

    @property
    @_reads_file
    def fillvalue(self):
        """As h5py reports it: raw_data's, ``b""`` for variable-length strings.

        See :func:`~xarray_vhdf5._backend.raw_data.reported_fillvalue`.
        """
        return reported_fillvalue(self.dtype, self.storage_fill)

    @property
    @_reads_file
    def filters(self) -> Filters:
        """The HDF5 filters of its raw_data."""
        return Filters.of(self.raw_data)

    @filters.setter
    def filters(self, value) -> None:
        raise ReadOnlyError(f"cannot set filters of {self.name!r}: {_HINT}")

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
        return super().maxshape

    @maxshape.setter
    def maxshape(self, value) -> None:
        raise ReadOnlyError(f"cannot set maxshape of {self.name!r}: {_HINT}")

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
        return super().nbytes

    @property
    @_reads_file
    def file(self) -> h5py.File:
        return super().file

    @property
    @_reads_file
    def parent(self) -> VersionGroup:
        """The group holding this dataset, in the same version (read-only)."""
        found = split_version_path(self.name)
        assert found is not None, "a version's dataset"
        return VersionGroup(self.file[posixpath.dirname(self.name)], found[1])

    @property
    @_reads_file
    def ref(self) -> h5py.Reference:
        """An HDF5 object reference to the version's virtual dataset (h5py's ``ref``)."""
        return super().ref

    @_reads_file
    def virtual_sources(self):
        """The virtual dataset's mappings (h5py's ``virtual_sources()``)."""
        return super().virtual_sources()

    @_reads_file
    def len(self) -> int:
        """Length of the first axis (h5py's ``len()``)."""
        return super().len()

    def __iter__(self):
        """Iterate over the first axis, as h5py datasets do."""
        for i in range(len(self)):
            yield self[i]

    def __getitem__(self, args, new_dtype=None):
        """``ds[index]``: h5py's read of the version's virtual dataset.

        A selection of no point (``ds[3:3]``, ``ds[[]]``) returns an empty
        array of its shape, as h5py does for other datasets (libhdf5 fails
        such reads of a virtual dataset with many mappings). ``new_dtype`` is
        h5py's, for its ``astype()`` / ``fields()`` views.

        Raises
        ------
        ClosedFileError
            The file was closed.
        IndexError, TypeError, ValueError
            Where h5py raises them (a bad index).
        """
        try:
            return super().__getitem__(args, new_dtype=new_dtype)
        except (OSError, RuntimeError):  # libhdf5 failed (h5py's index errors are not these)
            self._raise_if_closed()
            empty = empty_selection(self.shape, new_dtype if new_dtype is not None else self.dtype, args)
            if empty is None:
                raise
            return empty

    def __array__(self, dtype=None, copy=None):
        arr = self[()]
        return arr if dtype is None else arr.astype(dtype)

    @_reads_file
    def asstr(self, *args, **kwargs):
        """h5py's ``asstr()`` view for variable-length string datasets."""
        return super().asstr(*args, **kwargs)

    @_reads_file
    def astype(self, dtype):
        """h5py's ``astype()`` view: ``ds.astype("f4")[sel]`` reads converted points."""
        return super().astype(dtype)

    @_reads_file
    def fields(self, names, *, _prior_dtype=None):
        """h5py's ``fields()`` view of a compound dataset (``_prior_dtype``: h5py's, for ``ds["a"]``)."""
        return super().fields(names, _prior_dtype=_prior_dtype)

    @_reads_file
    def read_direct(self, dest, source_sel=None, dest_sel=None) -> None:
        """Read into an existing numpy array (h5py's ``read_direct``)."""
        super().read_direct(dest, source_sel, dest_sel)

    def iter_chunks(self, sel=None):
        """Slices of the dataset's chunks meeting ``sel`` (h5py's ``iter_chunks``).

        Over ``chunks``, the unit of deduplication (the virtual dataset itself
        has no chunks). See :func:`.dataset_api.chunk_slices`.
        """
        return chunk_slices(self.shape, self.chunks, sel)

    @property
    def dims(self):
        """Refused: h5py's dimension scales write attributes of the committed version.

        Raises
        ------
        ReadOnlyError
            Always; read ``_ARRAY_DIMENSIONS`` or ``DIMENSION_LIST`` from ``attrs``.
        """
        raise ReadOnlyError(f"cannot use dimension scales of {self.name!r}: {_HINT}")

    @property
    def staged_array(self) -> StagedChangesArray:
        """Refused: a committed version's dataset stages nothing.

        Raises
        ------
        ReadOnlyError
            Always (reading the points: index the dataset).
        """
        raise ReadOnlyError(f"{self.name!r} has no staged array: {_HINT}")

    @staged_array.setter
    def staged_array(self, array: StagedChangesArray) -> None:
        raise ReadOnlyError(f"cannot stage points into {self.name!r}: {_HINT}")

    def replace_array(self, array: StagedChangesArray, base_table_state: tuple[int, bytes] | None) -> None:
        raise ReadOnlyError(f"cannot stage points into {self.name!r}: {_HINT}")

    def __setitem__(self, index, value):
        raise ReadOnlyError(f"cannot write to {self.name!r}: {_HINT}")

    def resize(self, *args, **kwargs):
        raise ReadOnlyError(f"cannot resize {self.name!r}: {_HINT}")

    def write_direct(self, *args, **kwargs):
        raise ReadOnlyError(f"cannot write to {self.name!r}: {_HINT}")

    def make_scale(self, *args, **kwargs):
        raise ReadOnlyError(f"cannot make {self.name!r} a dimension scale: {_HINT}")

    def __repr__(self) -> str:
        if not self.id.valid:
            return "<Closed VersionDataset>"
        return f"<VersionDataset {self.name!r}: shape {self.shape}, type {self.dtype.str!r} (read-only)>"


class VersionArrayDataset(VersionDataset, InMemoryArrayDataset):  # type: ignore[misc]  # _data: never read
    """A committed dataset seen through the staged group that created it from data.

    versioned-hdf5 2.6 keeps a staged group's ``InMemoryArrayDataset`` after
    the commit (read-only); here the staged points are let go at the commit
    (``InMemoryGroup._close``) and the group reads the committed version, so
    the dataset it hands out for such a name is this: a :class:`VersionDataset`
    that is also an :class:`~xarray_vhdf5._wrappers.dataset.InMemoryArrayDataset`.
    """

    @property
    def data(self) -> np.ndarray:
        """The committed points, read (the staged array is gone)."""
        return self[()]


class VersionGroup(h5py.Group, InMemoryGroup):
    """A group of a committed version (the version's root or a subgroup), read-only.

    An ``h5py.Group`` bound to the version's group, and an
    :class:`~xarray_vhdf5._wrappers.group.InMemoryGroup` (versioned-hdf5 2.6's
    committed one). Members are :class:`VersionGroup` and :class:`VersionDataset`.

    Parameters
    ----------
    group : h5py.Group, h5py.h5g.GroupID or None
        The version's group (or subgroup). None with ``parent`` and ``path``: the
        group is opened only when something of its own is asked (attrs, listing,
        ``id``); ``version_group["x"]`` then opens ``x`` straight from ``parent``,
        one HDF5 object open per read instead of two.
    version : str
        The version's name.
    array_paths : frozenset of str, optional
        Paths inside the version of datasets to hand out as
        :class:`VersionArrayDataset` (those a staged group created from data;
        given by the staged group reading its committed version).

    Raises
    ------
    ClosedFileError
        From every read (members, attributes, names, ...) once the h5py file
        was closed.
    ReadOnlyError
        From every write.
    """

    def __init__(
        self,
        group: h5py.Group | h5g.GroupID | None,
        version: str,
        *,
        parent: h5py.Group | None = None,
        path: str | None = None,
        array_paths: frozenset[str] = frozenset(),
    ):
        if group is None and (parent is None or path is None):
            raise TypeError("VersionGroup needs a group, or a parent group and a path")
        self._id = group.id if isinstance(group, h5py.Group) else group
        self._plain: h5py.Group | None = None
        self.version = version
        self._attrs: ReadOnlyAttrs | None = None
        self._parent: Any = parent  # with _path: where to open the group on first use
        self._path = path
        self._array_paths = array_paths

    @property
    def id(self) -> h5g.GroupID:
        """The h5py low-level id of the group (opened on first use).

        Raises
        ------
        ClosedFileError
            The file was closed before the group was first opened.
        """
        if self._id is None:
            try:
                self._id = self._parent[self._path].id
            except Exception:
                self._raise_if_closed()
                raise
        return self._id

    def _held_valid(self) -> bool:
        """Whether the HDF5 object it holds (its own once opened, else its parent) is open."""
        return bool((self._id if self._id is not None else self._parent.id).valid)

    def _raise_if_closed(self) -> None:
        if not self._held_valid():
            raise closed_file_error(f"version {self.version!r}") from None

    def _check_open(self) -> None:
        """Refuse every edit (the staged classes' check before one)."""
        raise ReadOnlyError(f"cannot modify version {self.version!r}: {_HINT}")

    @property
    def group(self) -> h5py.Group:
        """The plain ``h5py.Group`` on the same id (its members unwrapped)."""
        if self._plain is None:
            self._plain = h5py.Group(self.id)
        return self._plain

    @property  # type: ignore[override]  # a staged group's are StagedAttrs
    def attrs(self) -> ReadOnlyAttrs:
        """The group's attributes (for a version's root: the version's attrs), read-only."""
        if self._attrs is None:
            self._attrs = ReadOnlyAttrs(self.group.attrs)
        return self._attrs

    @attrs.setter
    def attrs(self, value) -> None:
        raise ReadOnlyError(f"cannot replace the attributes of version {self.version!r}: {_HINT}")

    @property
    @_reads_file
    def name(self) -> str:
        if self._id is None:
            return f"{self._parent.name.rstrip('/')}/{self._path}"
        return self.group.name

    @name.setter
    def name(self, value) -> None:
        raise ReadOnlyError(f"cannot set the name of {self.name!r}: {_HINT}")

    def _wrap_dataset(self, dsid: h5d.DatasetID) -> VersionDataset:
        if self._array_paths:
            name = h5py.h5i.get_name(dsid).decode()
            found = split_version_path(name)
            if found is not None and name[len(found[0]) + 1 :] in self._array_paths:
                return VersionArrayDataset(dsid, self.version)
        return VersionDataset(dsid, self.version)

    def _wrap(self, item):
        """A member as this version hands it out."""
        if isinstance(item, h5py.Group):
            return VersionGroup(item, self.version, array_paths=self._array_paths)
        if isinstance(item, h5py.Dataset):
            return self._wrap_dataset(item.id)
        return item  # a named datatype, as h5py hands it out

    def __getitem__(self, path):
        try:
            if isinstance(path, str) and path and not path.startswith("/"):
                # h5py's Group.__getitem__ without its checks of the file's mode (and the
                # h5py object made only to be wrapped); unopened, straight from the parent
                if self._id is None:
                    oid = h5o.open(self._parent.id, f"{self._path}/{path}".encode())
                else:
                    oid = h5o.open(self._id, path.encode())
                if isinstance(oid, h5d.DatasetID):
                    return self._wrap_dataset(oid)
                item = h5py.Group(oid) if isinstance(oid, h5g.GroupID) else h5py.Datatype(oid)
            else:
                item = self.group[path]
        except Exception as exc:  # nothing asked before h5py fails
            self._raise_if_closed()
            if not isinstance(exc, KeyError):
                raise
            raise KeyError(f"no dataset or group {path!r} in version {self.version!r} ({self.name})") from None
        return self._wrap(item)

    def get(self, path, default=None, getclass=False, getlink=False):
        """``self[path]`` if there is such a member, else ``default`` (h5py's ``getclass``/``getlink`` too)."""
        if getclass or getlink:
            return self.group.get(path, default, getclass, getlink)
        return self[path] if path in self else default

    @property
    @_reads_file
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
        return VersionGroup(self.group.parent, self.version, array_paths=self._array_paths)

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
        return self._held_valid()

    @_reads_file
    def keys(self):
        return list(self.group.keys())

    def values(self):
        return [self[k] for k in self.keys()]

    def items(self):
        return [(k, self[k]) for k in self.keys()]

    @_reads_file
    def visititems(self, func):
        return self.group.visititems(lambda path, obj: func(path, self._wrap(obj)))

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
                found[path] = self._wrap(obj)

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
        """Refused: a committed version is read-only.

        Raises
        ------
        ReadOnlyError
            Always (a ``PermissionError`` and ``ValueError``); stage a new version instead.
        """
        raise ReadOnlyError(f"cannot modify version {self.version!r}: {_HINT}")

    __setitem__ = __delitem__ = create_dataset = create_group = require_dataset = _refuse
    require_group = move = copy = clear = pop = popitem = setdefault = update = _refuse
    create_dataset_like = create_virtual_dataset = build_virtual_dataset = _refuse

    def __repr__(self) -> str:
        if not self._held_valid():
            return f"<Closed VersionGroup of version {self.version!r}>"
        return f"<VersionGroup {self.name!r} of version {self.version!r} (read-only)>"
