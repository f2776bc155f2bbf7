"""The h5py-like group of a staged version (``stage_version()`` yields one).

It mirrors the previous version's tree: subgroups, datasets (staged lazily)
and attrs; everything done to it stays in memory until the ``with`` block exits.

A dataset of the previous version is opened on first access only: until then
the group holds an :class:`UnopenedDataset` (its name and object address,
from one ``H5Oget_info_by_name``). Opening a virtual dataset makes libhdf5
decode its layout, every mapping, and the staged wrapper reads its format
attributes and finds its raw_data, for every dataset. A commit
copies a dataset never opened straight from the previous version
(``versions.commit``), so a version that edits one dataset of many pays for
that one.
"""

from __future__ import annotations

import posixpath
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np
from h5py import h5i, h5o

from .._backend.chunkmap import version_dataset_layout
from .._backend.chunkmap_cache import ChunkMapCache
from .._backend.chunks import guess_chunks_h5py
from .._backend.h5objects import member_names, object_info_by_name, relinked
from .._backend.hashing import is_vlen_string_dtype
from .._backend.held import OpenDatasets
from .._backend.layout import RESERVED_NAMES, VERSION_ATTRS, VERSION_DATA, split_version_path
from .._backend.raw_data import Filters
from ..errors import DatasetMismatchError, IncompatibleDataError, ReadOnlyError, StaleVersionError
from .attrs import RESERVED_ATTRS, StagedAttrs
from .chunked import InMemoryDataset
from .create import new_array_dataset
from .dataset import InMemoryArrayDataset, StagedDatasetBase
from .group_api import GroupAPI

__all__ = ["InMemoryGroup", "UnopenedDataset"]


@dataclass(slots=True)
class UnopenedDataset:
    """A dataset of the previous version not accessed in this stage (opened on first access).

    Parameters
    ----------
    gid : h5py.h5g.GroupID
        The previous version's group holding it.
    bname : bytes
        Its link name in ``gid``.
    name : str
        Its path inside the version.
    source_path : bytes
        Its absolute path in the file, and ``address`` its object address, when
        staged: :meth:`check` refuses it if another object is linked there since.
    address : int
        See ``source_path``.
    num_attrs : int
        Its number of attributes when staged: its copy's too
        (``carry_virtual_dataset``), unless attributes of the committed version
        were edited by hand (h5py) meanwhile.
    """

    gid: Any
    bname: bytes
    name: str
    source_path: bytes
    address: int
    num_attrs: int

    def check(self) -> None:
        """Refuse a dataset of the previous version that another handle replaced or deleted since staging.

        Deleting versions rebuilds the survivors' virtual datasets over a
        compacted raw_data, ``modify_metadata`` replaces them; deleting the
        previous version unlinks it. Checked before the dataset is opened and
        before a commit copies it (``backend.h5objects.relinked``).

        Raises
        ------
        StaleVersionError
            Another object, or none, is linked at its path now.
        """
        why = relinked(self.gid, self.source_path, self.address)
        if why is not None:
            raise StaleVersionError(
                f"{self.name!r}: the previous version's dataset ({self.source_path.decode()}) {why} while this "
                "version was staged (by another handle: deleting versions or modify_metadata); stage the version again"
            )


class InMemoryGroup(GroupAPI):
    """A group of a staged version: create, read, replace and delete datasets and groups.

    Parameters
    ----------
    name : str
        Path of the group inside the version (``""`` for the version's root).
    source : h5py.Group, optional
        The same group in the previous version, mirrored lazily.
    root : InMemoryGroup, optional
        The version's root group, for a subgroup; ``None`` for the root itself.
        The keywords below describe the file handle staging the version and are
        given to the root only (subgroups read them from ``root``).
    open_datasets : OpenDatasets, optional
        The file handle's held ``hash_table`` and ``raw_data`` datasets
        (:class:`~xarray_vhdf5._backend.held.OpenDatasets`).
    chunk_map_cache : ChunkMapCache, optional
        Chunk maps of the handle's last commit
        (:class:`~xarray_vhdf5._backend.chunkmap_cache.ChunkMapCache`).
    versions_state : tuple of (int, int), optional
        The versions group's state when staging began, which
        :meth:`ChunkMapCache.get <xarray_vhdf5._backend.chunkmap_cache.ChunkMapCache.get>`
        checks a kept chunk map against.
    h5file : h5py.File or h5py.Group, optional
        The file or group the handle was given; reads through this tree after
        its commit go to the committed version in it.
    stored_map : callable, optional
        ``stored_map(source_path)``: None when no chunk map was stored for the
        previous version's dataset at ``source_path`` (its HDF5 path, ``str``),
        else a function ``read(raw_data, chunks)`` giving ``(shape, starts)``:
        its shape (points) and each chunk's first row in raw_data (int64, -1
        unmapped), or None when the map cannot be trusted
        (:class:`~xarray_vhdf5._versions.chunkmaps.StoredLayouts`; this module
        cannot import it). A dataset with one is staged without opening its
        virtual dataset (libhdf5 would decode every mapping).
    """

    def __init__(
        self,
        name: str = "",
        source: h5py.Group | None = None,
        *,
        root: InMemoryGroup | None = None,
        open_datasets: OpenDatasets | None = None,
        chunk_map_cache: ChunkMapCache | None = None,
        versions_state: tuple[int, int] | None = None,
        h5file: h5py.File | h5py.Group | None = None,
        stored_map: Callable[[str], Callable[..., tuple[tuple[int, ...], np.ndarray] | None] | None] | None = None,
    ):
        self.name = name
        self._root = root if root is not None else self
        #: On a version's root: the file handle's held datasets (``backend.held.OpenDatasets``).
        self.open_datasets = open_datasets
        self._children: dict[str, InMemoryGroup | StagedDatasetBase | UnopenedDataset] = {}
        self.attrs = StagedAttrs(
            source.attrs if source is not None else None,
            skip=VERSION_ATTRS,
            obj_id=source.id if source is not None else None,
        )
        self._closed = False
        #: Set on a version's root once committed: the version group's path in the file.
        self.committed_as: str | None = None
        #: Set on a version's root once committed, with ``committed_as``: what reads
        #: through this tree are handed (``view(h5py_group, version, array_paths=...)``,
        #: :class:`~xarray_vhdf5._wrappers.readonly.VersionGroup`; this module cannot import it).
        self.committed_view: Callable[..., Any] | None = None
        #: On a version's root once closed: paths of the datasets it created from data
        #: (``InMemoryArrayDataset``), which reads after the commit hand out as such.
        self._array_paths: frozenset[str] = frozenset()
        #: On a version's root: chunk maps of the last commit, and the versions
        #: group's state when staging began (``ChunkMapCache.get``).
        self.chunk_map_cache = chunk_map_cache
        self.versions_state = versions_state
        #: On a version's root: the h5py file or group the handle was given (``file``).
        self.h5file = h5file
        #: On a version's root: the stored chunk maps of the previous version (``stored_map``).
        self.stored_map = stored_map
        if source is not None:
            # Through the low-level API, in h5py's order (``Group.items()`` builds
            # more objects per member).
            gid = source.id
            prefix = h5i.get_name(gid).rstrip(b"/") + b"/"
            for bkey in member_names(gid):
                key = bkey.decode("utf-8")
                path = posixpath.join(name, key)
                address, kind, num_attrs = object_info_by_name(gid, bkey)
                if kind == h5o.TYPE_DATASET:  # opened on first access
                    self._children[key] = UnopenedDataset(gid, bkey, path, prefix + bkey, address, num_attrs)
                elif kind == h5o.TYPE_GROUP:
                    self._children[key] = InMemoryGroup(path, h5py.Group(h5o.open(gid, bkey)), root=self._root)
                else:  # e.g. a named datatype: as h5py returns it
                    self._children[key] = InMemoryDataset(path, self, source[key])

    def _close(self) -> None:
        """Close the staged tree (committed or discarded) and let go of its staged data.

        Groups and their datasets refer to each other (``parent``, ``_children``),
        so a tree is a reference cycle that only Python's cyclic garbage collector
        frees, and it runs seldom: a pipeline committing in a loop held one
        tree, and its staged slabs, per commit until it did (40 MiB after 200
        daily appends). Emptying the groups breaks the cycles, so a tree's data
        goes with the ``with`` block; a dataset still held by the caller keeps
        its own data (reads work, edits raise ``ReadOnlyError``).
        """
        self._root._closed = True
        stack = [self]
        array_paths = []
        while stack:
            group = stack.pop()
            for child in group._children.values():
                if isinstance(child, InMemoryGroup):
                    stack.append(child)
                elif isinstance(child, InMemoryArrayDataset):
                    array_paths.append(child.name)
            group._children = {}
        self._root._array_paths = frozenset(array_paths)

    # -- navigation ----------------------------------------------------------
    def _child(self, key: str):
        """Member ``key``, a previous version's dataset opened if it was not yet."""
        child = self._children[key]
        if type(child) is UnopenedDataset:
            child.check()  # opened through its group's id, which outlives an unlink
            held = self._root.open_datasets
            oid = held.made(child.source_path, child.address) if held is not None else None
            staged = None
            if oid is None and self._root.stored_map is not None and held is not None:
                staged = InMemoryDataset.from_stored_map(child.name, self, child)
            if staged is None:
                if oid is None:
                    oid = h5o.open(child.gid, child.bname)
                staged = InMemoryDataset(child.name, self, oid)
            child = self._children[key] = staged
        return child

    def _check_open(self) -> None:
        if self._root._closed:
            raise ReadOnlyError("this staged version was committed (or discarded); stage a new version to edit")

    def _walk(self, path: str, create: bool = False) -> tuple[InMemoryGroup, str]:
        """Return (parent group, last name) of ``path`` relative to this group."""
        parts = [p for p in path.split("/") if p]
        if not parts:
            raise ValueError(f"invalid name {path!r}")
        group = self if not path.startswith("/") else self._root
        for part in parts[:-1]:
            child = group._children.get(part)
            if child is None:
                if not create:
                    raise KeyError(f"no group {part!r} in {group.name or '/'!r}")
                child = group.create_group(part)
            if not isinstance(child, InMemoryGroup):
                raise IncompatibleDataError(f"{child.name!r} is a dataset, not a group")
            group = child
        return group, parts[-1]

    def _committed_view(self):
        """This group as committed (a read-only ``VersionGroup``), once its staged version was committed; else None.

        A staged tree is emptied when its version is committed (see ``_close``);
        reads through a group kept past the ``with`` block then go to the
        committed version, as versioned-hdf5 2.6 serves them. A dataset the
        version created from data is handed out as a ``VersionArrayDataset``
        (an ``InMemoryArrayDataset`` still, as versioned-hdf5 keeps it), the
        others as ``VersionDataset`` (an ``InMemoryDataset``).
        """
        root = self._root
        where = getattr(root, "h5file", None)
        view = root.committed_view
        if not root._closed or root.committed_as is None or view is None or where is None or not where.id.valid:
            return None
        try:
            h5group = where.file[posixpath.join(root.committed_as, self.name).rstrip("/")]
        except (KeyError, ValueError):
            return None  # the version was deleted since
        return view(h5group, root.committed_as.rpartition("/")[2], array_paths=root._array_paths)

    def __getitem__(self, path: str):
        """Member ``path`` (relative to this group); after the commit, the committed version's, read-only.

        Raises
        ------
        KeyError
            No such member.
        ReadOnlyError
            The staged version was discarded (or its committed version deleted since).
        """
        if self._root._closed:
            view = self._committed_view()
            if view is not None:
                return view[path]
        self._check_open()
        group, last = self._walk(path)
        try:
            return group._child(last)
        except KeyError:
            raise KeyError(f"no dataset or group {path!r} in staged group {self.name or '/'!r}") from None

    def get(self, path: str, default=None):
        try:
            return self[path]
        except KeyError:
            return default

    def __contains__(self, path: object) -> bool:
        if self._root._closed and (view := self._committed_view()) is not None:
            return path in view
        try:
            group, last = self._walk(str(path))
        except (KeyError, ValueError, IncompatibleDataError):
            return False
        return last in group._children

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.keys())

    def keys(self):
        if self._root._closed and (view := self._committed_view()) is not None:
            return view.keys()
        return list(self._children)

    def values(self):
        return [self._child(key) for key in list(self._children)]

    def items(self):
        return [(key, self._child(key)) for key in list(self._children)]

    def visititems(self, func: Callable[[str, Any], Any]):
        """Call ``func(relative_path, object)`` on every descendant, as h5py does."""
        for key in list(self._children):
            child = self._child(key)
            rel = key
            result = func(rel, child)
            if result is not None:
                return result
            if isinstance(child, InMemoryGroup):

                def below(p: str, o: Any, rel: str = rel) -> Any:
                    return func(f"{rel}/{p}", o)

                result = child.visititems(below)
                if result is not None:
                    return result
        return None

    def visit(self, func: Callable[[str], Any]):
        return self.visititems(lambda p, _o: func(p))

    # -- editing -------------------------------------------------------------
    def _check_name(self, group: InMemoryGroup, last: str) -> None:
        self._check_open()
        if group is self._root and last in RESERVED_NAMES:
            raise ValueError(
                f"{last} is a forbidden dataset or group name: reserved at the top level of versioned files"
            )
        if last in group._children:
            raise ValueError(f"unable to create {posixpath.join(group.name, last)!r}: name already exists")

    def create_group(self, path: str) -> InMemoryGroup:
        """Create a subgroup (intermediate groups too).

        Raises
        ------
        ValueError
            It exists; or ``path`` is absolute (``"/grp"``), which versioned-hdf5
            2.6 refuses too ("Root level groups cannot be created inside of
            versioned groups").
        """
        _refuse_absolute(path)
        group, last = self._walk(path, create=True)
        self._check_name(group, last)
        child = InMemoryGroup(posixpath.join(group.name, last), root=self._root)
        group._children[last] = child
        return child

    def require_group(self, path: str) -> InMemoryGroup:
        """The subgroup at ``path``, created if missing (h5py); an absolute path from the version's root.

        Raises
        ------
        TypeError
            A dataset is at ``path``.
        """
        if path.startswith("/"):
            return self._root.require_group(path.lstrip("/")) if path.strip("/") else self._root
        if path in self:
            item = self[path]
            if not isinstance(item, InMemoryGroup):
                raise TypeError(f"{path!r} exists and is a dataset")
            return item
        return self.create_group(path)

    def create_dataset(
        self,
        path: str,
        shape=None,
        dtype=None,
        data=None,
        *,
        chunks=None,
        compression=None,
        compression_opts=None,
        fillvalue=None,
        maxshape=None,
        shuffle: bool = False,
        fletcher32: bool = False,
        scaleoffset=None,
        **kwargs,
    ) -> StagedDatasetBase:
        """Create a dataset in the staged version (h5py's ``create_dataset``).

        Parameters
        ----------
        path : str
            Name, relative to this group; intermediate groups are created.
        shape, dtype, data
            As h5py: ``data`` alone, or ``shape`` (and ``dtype``, default
            float64 as in versioned-hdf5; h5py's is float32) for a dataset of
            fill values.
        chunks : tuple of int, optional
            Chunk shape, in points: the unit of deduplication. Default
            ``(4096,)`` for 1-d, h5py's guess otherwise.
        compression, compression_opts, shuffle, fletcher32, scaleoffset
            HDF5 filters of the dataset's raw_data (fixed by its first version).
        fillvalue : scalar, optional
            Fill value; chunks entirely of it are not stored.
        maxshape : tuple, optional
            Largest shape ``resize`` accepts in this staged version; default
            unlimited. It is not stored: other than all None, it warns
            "The maxshape parameter is currently ignored for versioned datasets
            once committed..." (a ``UserWarning``; versioned-hdf5 2.6 warns and
            ignores it).
        **kwargs
            h5py's other ``create_dataset`` keywords (``track_order``,
            ``track_times``, ``dcpl``, ...) have no meaning for a versioned
            dataset: given (not None), each warns "The <name> parameter is
            currently ignored for versioned datasets." (a ``UserWarning``, as
            versioned-hdf5 2.6 says) and is ignored.

        A dataset of the previous version of that name is replaced (as
        versioned-hdf5 does; the new one must still fit its raw_data at commit:
        dtype, chunks, fill value). The previous version keeps it.

        Raises
        ------
        ValueError
            A dataset or group created in this staged version, or a reserved
            name, is at ``path``; ``path`` is absolute (versioned-hdf5 2.6
            refuses it too).
        UnsupportedError
            Scalar datasets or ``h5py.Empty``.
        IncompatibleDataError
            Shapes, chunks or maxshape that do not fit.
        TypeError
            A keyword argument that is not h5py's.
        """
        _refuse_absolute(path)
        unknown = sorted(set(kwargs) - _IGNORED_H5PY_KEYWORDS)
        if unknown:
            raise TypeError(
                f"create_dataset got unsupported arguments: {unknown} (h5py's own {sorted(_IGNORED_H5PY_KEYWORDS)} "
                "are accepted and ignored)"
            )
        for key, value in kwargs.items():
            if value is not None:
                warnings.warn(
                    f"The {key} parameter is currently ignored for versioned datasets.", UserWarning, stacklevel=2
                )
        if maxshape is not None and not (isinstance(maxshape, tuple) and set(maxshape) == {None}):
            # versioned-hdf5 2.6 warns so and ignores it; here it bounds resize until the commit.
            warnings.warn(
                "The maxshape parameter is currently ignored for versioned datasets once committed: it bounds "
                "resize only in the staged version that creates the dataset, and is not stored.",
                UserWarning,
                stacklevel=2,
            )
        group, last = self._walk(path, create=True)
        if isinstance(group._children.get(last), (InMemoryDataset, UnopenedDataset)):
            self._check_open()  # the previous version's dataset: replaced below
        else:
            self._check_name(group, last)
        filters = Filters(compression, compression_opts, bool(shuffle), bool(fletcher32), scaleoffset)
        new_path = posixpath.join(group.name, last)
        ds = new_array_dataset(
            new_path,
            group,
            shape=shape,
            dtype=dtype,
            data=data,
            chunks=chunks,
            fillvalue=fillvalue,
            maxshape=maxshape,
            filters=filters,
            pinned=_pinned_layout(self._root, new_path),
        )
        group._children[last] = ds
        return ds

    def require_dataset(self, path: str, shape, dtype, exact: bool = False, **kwargs):
        """Return the existing dataset if shape and dtype match, else create it (h5py).

        Raises
        ------
        DatasetMismatchError
            The existing dataset has another shape, or a dtype ``dtype`` cannot
            be cast to (``exact``: another dtype); a ``TypeError`` as in h5py.
        TypeError
            A group exists at ``path``.
        """
        if path in self:
            ds = self[path]
            if not isinstance(ds, StagedDatasetBase):
                raise TypeError(f"{path!r} exists and is a group")
            shape = (shape,) if isinstance(shape, int) else tuple(shape)
            if ds.shape != shape:
                raise DatasetMismatchError(f"shapes do not match (existing {ds.shape} vs new {shape})")
            if (exact and ds.dtype != np.dtype(dtype)) or not np.can_cast(dtype, ds.dtype):
                raise DatasetMismatchError(f"dtypes do not match (existing {ds.dtype} vs new {dtype})")
            return ds
        return self.create_dataset(path, shape=shape, dtype=dtype, **kwargs)

    def __setitem__(self, path: str, value) -> None:
        """``group[name] = value`` creates a dataset; an existing dataset of that name is replaced.

        Parameters
        ----------
        path : str
            Name, relative to this group; intermediate groups are created.
        value : array_like, staged dataset, or a committed version's dataset
            - An array over an existing dataset: its new points, of any shape;
              the dataset keeps its chunks, fill value, filters and attributes
              (as versioned-hdf5 2.6 does; a ``resize`` then pads with its
              fill value). Another dtype is refused at commit, as by the
              dataset's first version.
            - An array of a new name: a new dataset with h5py's chunk guess, no
              attributes.
            - A dataset of a committed version of this file (``vf["v1"]["x"]``,
              or its ``h5py.Dataset``): the dataset as it is in that version,
              with its attributes (as versioned-hdf5 copies it). Nothing is
              read: at the same path (a revert) the commit copies that
              version's virtual dataset with ``H5Ocopy`` and writes no chunk;
              at another path its chunks are read and stored in that path's
              raw_data at commit.
            - Another dataset (staged, or of another file): its data and attributes.

        Replacing a dataset is versioned-hdf5's behaviour (h5py would refuse);
        new data is deduplicated against the stored chunks at commit. A group
        of that name is not replaced.

        Raises
        ------
        ValueError
            A group (or a reserved name) is at ``path``.
        IncompatibleDataError
            An array of another number of dimensions than the dataset it would
            replace; the dataset is kept.
        TypeError
            ``value`` is a group.

        Whatever raises, the dataset at ``path`` is left as it was.
        """
        self._check_open()
        if isinstance(value, (InMemoryGroup, h5py.Group)):
            raise TypeError("assigning groups is not supported; use create_group")
        group, last = self._walk(path, create=True)
        replaced = group._children.get(last)
        if not isinstance(replaced, (StagedDatasetBase, UnopenedDataset)):
            self._check_name(group, last)
            replaced = None
        new_path = posixpath.join(group.name, last)
        committed = _committed_dataset(value, self._root)
        ds: StagedDatasetBase
        if committed is not None:
            dsid, origin = committed
            ds = InMemoryDataset(new_path, group, dsid)
            ds.origin_name = origin  # where its raw_data lives: a copy elsewhere stores its chunks anew
        elif isinstance(value, (StagedDatasetBase, h5py.Dataset)):
            ds = new_array_dataset(
                new_path,
                group,
                data=value[()],
                default_chunks=lambda shape, dtype: guess_chunks_h5py(shape, dtype.itemsize),
                pinned=_pinned_layout(self._root, new_path),
            )
            for key, val in value.attrs.items():
                if key not in RESERVED_ATTRS:
                    ds.attrs[key] = val
        elif replaced is not None:
            ds = _new_points(group, last, new_path, value)
        else:  # an array: n-d data needs chunks by its commit, as in versioned-hdf5 2.6
            ds = new_array_dataset(
                new_path,
                group,
                data=value,
                default_chunks=lambda shape, dtype: guess_chunks_h5py(shape, dtype.itemsize),
                pinned=_pinned_layout(self._root, new_path),
                require_nd_chunks=True,
            )
        group._children[last] = ds

    def __delitem__(self, path: str) -> None:
        self._check_open()
        group, last = self._walk(path)
        if last not in group._children:
            raise KeyError(f"no dataset or group {path!r} to delete")
        del group._children[last]

    def move(self, source: str, dest: str) -> None:
        """Move (rename) a dataset or group inside the staged version (h5py's ``move``)."""
        self._check_open()
        obj = self[source]
        group, last = self._walk(dest, create=True)
        self._check_name(group, last)
        del self[source]
        _rename(obj, posixpath.join(group.name, last))
        group._children[last] = obj

    def __repr__(self) -> str:
        committed = self._root.committed_as
        if committed is not None:  # versioned-hdf5's form, the group's path in the file
            return f'<Committed InMemoryGroup "{posixpath.join(committed, self.name).rstrip("/")}">'
        return f"<InMemoryGroup {self.name or '/'!r} ({len(self)} members)>"

    # -- for the commit ------------------------------------------------------
    def datasets(self) -> dict[str, StagedDatasetBase]:
        """All staged datasets below this group, by path inside the version."""
        out: dict[str, StagedDatasetBase] = {}

        def collect(_path, obj):
            if isinstance(obj, StagedDatasetBase):
                out[obj.name] = obj

        self.visititems(collect)
        return out

    def members_for_commit(self) -> tuple[list[InMemoryGroup], dict[str, StagedDatasetBase | UnopenedDataset]]:
        """Subgroups and datasets below this group, in :meth:`visititems` order, none opened.

        Returns
        -------
        groups : list of InMemoryGroup
            Every subgroup, parents first.
        datasets : dict
            Path inside the version -> staged dataset, or :class:`UnopenedDataset`
            for one never accessed.
        """
        groups: list[InMemoryGroup] = []
        datasets: dict[str, StagedDatasetBase | UnopenedDataset] = {}

        # Depth first, a group before its members, without a recursive closure (a
        # closure calling itself is a reference cycle that would keep the tree alive).
        stack = [iter(self._children.values())]
        while stack:
            for child in stack[-1]:
                if isinstance(child, InMemoryGroup):
                    groups.append(child)
                    stack.append(iter(child._children.values()))
                    break
                if isinstance(child, (StagedDatasetBase, UnopenedDataset)):
                    datasets[child.name] = child
            else:
                stack.pop()
        return groups, datasets


#: h5py's ``create_dataset`` keywords that mean nothing for a versioned dataset: ignored
#: with versioned-hdf5's warning (any other unknown keyword is a TypeError).
_IGNORED_H5PY_KEYWORDS = frozenset(
    {
        "track_times",
        "track_order",
        "external",
        "allow_unknown_filter",
        "dcpl",
        "dapl",
        "efile_prefix",
        "virtual_prefix",
        "rdcc_nbytes",
        "rdcc_nslots",
        "rdcc_w0",
    }
)


def _refuse_absolute(path: str) -> None:
    """Raise ValueError for an absolute path, as versioned-hdf5 2.6's ``create_group``/``create_dataset``."""
    if isinstance(path, str) and path.startswith("/"):
        raise ValueError(
            f"Root level groups cannot be created inside of versioned groups: {path!r} is absolute; "
            "give a path relative to the group"
        )


def _pinned_layout(root: InMemoryGroup, path: str) -> tuple[tuple[int, ...], object] | None:
    """``(chunks, fill value)`` of the raw_data ``path`` has in the file, None if it has none.

    A dataset deleted in an earlier version keeps its raw_data while a version
    holds it; created again (``create_dataset``, ``group[name] = array``), it
    must take that raw_data's chunks and fill value (the commit adopts them):
    a ``resize`` staged before the commit then pads with the right fill value.
    One link lookup; nothing is read for a path that never had a dataset.
    """
    where = getattr(root, "h5file", None)
    if where is None or not where.id.valid:
        return None
    try:
        raw = where.get(posixpath.join(VERSION_DATA, path, "raw_data"))
    except (KeyError, ValueError, TypeError):
        return None
    if not isinstance(raw, h5py.Dataset) or "chunks" not in raw.attrs:
        return None
    chunks = tuple(int(c) for c in raw.attrs["chunks"])
    return chunks, (None if is_vlen_string_dtype(raw.dtype) else raw.fillvalue)


def _new_points(group: InMemoryGroup, last: str, path: str, value) -> StagedDatasetBase:
    """New points for the dataset ``group[last]``: its chunks, fill value, filters and attributes kept."""
    old = group[last]
    data = np.asarray(value)
    if data.ndim and data.ndim != len(old.shape):  # 0-d: new_array_dataset's UnsupportedError
        raise IncompatibleDataError(
            f"{path!r}: the new points have {data.ndim} dimensions (shape {data.shape}), the dataset they "
            f"replace {len(old.shape)} (shape {old.shape}); a dataset keeps its number of dimensions "
            "(delete it first to store another)"
        )
    ds = new_array_dataset(
        path,
        group,
        data=data,
        chunks=old.chunks,
        fillvalue=old.storage_fill,
        filters=old.filters,
    )
    for key, val in old.attrs.items():
        if key not in RESERVED_ATTRS:
            ds.attrs[key] = val
    return ds


def _committed_dataset(value, root: InMemoryGroup) -> tuple[h5py.h5d.DatasetID, str] | None:
    """``(id, path of its raw_data's dataset)`` when ``value`` is a committed version's dataset of ``root``'s file.

    A dataset inside a version group of the same versioned tree whose format
    attributes (``backend.chunkmap.version_dataset_layout``) name a raw_data
    ``<root>/_version_data/<path>/raw_data``; ``<path>`` is returned. None for
    anything else (arrays, staged datasets, other files or trees).
    """
    dset = value  # a committed version's VersionDataset is an h5py.Dataset too
    where = getattr(root, "h5file", None)
    if not isinstance(dset, h5py.Dataset) or where is None or not dset.id.valid or dset.id.fileno != where.id.fileno:
        return None
    prefix = posixpath.join(where.name, VERSION_DATA) + "/"
    inside = split_version_path(dset.name or "")
    if inside is None or not inside[0].startswith(prefix):
        return None
    try:
        _chunks, raw_path = version_dataset_layout(dset)
    except IncompatibleDataError:
        return None
    if not raw_path.startswith(prefix) or not raw_path.endswith("/raw_data"):
        return None
    return dset.id, raw_path[len(prefix) : -len("/raw_data")]


def _rename(obj, new_name: str) -> None:
    old = obj.name
    obj.name = new_name
    if isinstance(obj, InMemoryGroup):
        for child in obj.values():  # opened: an opened dataset keeps where its raw_data lives
            _rename(child, new_name + child.name[len(old) :])
