"""Reading versions at the h5py level while other processes write the file.

``VersionedHDF5File(h5py.File(path, "r"))`` holds an HDF5 handle: libhdf5
caches the file's metadata, which goes stale once another process commits
(raw_data's chunk index is rewritten in place), and with libhdf5's default
locking the handle blocks every writer. :class:`SharedVersionedFile`
(``VersionedHDF5File.open(path)``) holds none between calls:

- the version list is read through a fresh read-only handle under the file's
  ``WRITE`` lock held shared (:meth:`~xarray_vhdf5.versions.sharing.SharedFile.open`),
  then the handle is closed; every call that needs it first reads the file's
  ``writes`` counter (16 bytes, :mod:`~xarray_vhdf5.versions.generation`) and
  reads the list again when another process wrote since;
- a version's group (:class:`SharedVersionGroup`) is a snapshot of the
  version's tree: member names and kinds, the groups' attributes;
- a dataset (:class:`SharedVersionDataset`) is a snapshot of its metadata
  (shape, dtype, chunks, filters, attributes) and of its chunk manifest
  (:class:`~xarray_vhdf5.backend.manifest.ChunkManifest`: the file offsets of
  its chunks); its points are read and decoded without libhdf5, through
  :meth:`~xarray_vhdf5.versions.sharing.SharedFile.read`, which resolves the
  version again when chunks moved (a deletion, ``modify_metadata``) and raises
  :class:`~xarray_vhdf5.errors.VersionNotFoundError` once the version was
  deleted. Datasets whose chunks cannot be decoded here (variable-length
  strings, filters without a decoder) are read through a fresh handle per
  read, under the same lock.

A commit waits for a reader only while the reader resolves something
(milliseconds), never while it holds objects; a reader arriving while a
writer waits waits for it (:mod:`~xarray_vhdf5.versions.locking`, the
gates). A dataset whose version was deleted, or deleted and committed again
under the same name, raises ``VersionNotFoundError``. Caveat (libhdf5): a process
opens a file once, so an ``h5py.File`` of the same file kept open elsewhere in
the process shares its (possibly stale) metadata cache with the "fresh"
handles; close it first.
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from collections.abc import Iterator, Mapping
from typing import Any, Callable

import h5py
import numpy as np
from h5py import h5o
from h5py._hl import selections as _selections

from ..backend.chunkmap import version_dataset_layout
from ..backend.hashing import is_vlen_string_dtype
from ..backend.h5objects import object_info_by_name
from ..backend.layout import DATA_VERSION, version_path
from ..backend.manifest import resolve_manifest
from ..backend.raw_data import reported_fillvalue
from ..errors import ClosedFileError, IncompatibleDataError, ReadOnlyError, UnsupportedError, VersionNotFoundError
from ..wrappers.dataset_api import FieldsView, chunk_slices
from . import chunkmaps, generation
from .locking import file_locks
from .rebuild import chunk_diff
from .registry import VersionInfo, VersionKey, VersionRegistry
from .sharing import SharedFile, version_dataset

__all__ = ["SharedAttrs", "SharedVersionDataset", "SharedVersionGroup", "SharedVersionedFile"]

_HINT = "VersionedHDF5File.open() reads versioned HDF5 files only"
_READ_ONLY = ("opened for reading with VersionedHDF5File.open(); stage, commit and delete through "
              "VersionedHDF5File(xarray_vhdf5.open_file(path))")


class _Registry(VersionRegistry):
    """A :class:`VersionRegistry` read through a handle that is closed afterwards.

    The two attributes the registry reads from the file on each use
    (``current_version``, ``data_version``) are read once here, so lookups
    (``resolve``, ``at_time``, ``info``) need no file.
    """

    def __init__(self, f: h5py.File, token: tuple):
        super().__init__(f)
        self._current = VersionRegistry.current_version.fget(self)
        self._data_version = VersionRegistry.data_version.fget(self)
        self.token = token  # the file's state it was read at (SharedVersionedFile._token)

    current_version = property(lambda self: self._current)
    data_version = property(lambda self: self._data_version)


#: Bytes of version trees and dataset manifests a reader keeps for reuse (an estimate).
CACHE_BYTES = 64 * 1024 * 1024


class _Lru:
    """A least-recently-used cache bounded by the sizes its entries are given (bytes)."""

    def __init__(self, budget: int):
        self._entries: dict = {}
        self._budget, self._used = budget, 0
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            item = self._entries.pop(key, None)
            if item is None:
                return None
            self._entries[key] = item  # most recent last
            return item[0]

    def put(self, key, value, size: int) -> None:
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._used -= old[1]
            self._entries[key] = (value, size)
            self._used += size
            while self._used > self._budget and len(self._entries) > 1:
                oldest = next(iter(self._entries))
                self._used -= self._entries.pop(oldest)[1]


class SharedAttrs(Mapping):
    """Attributes of a committed object as read when the object was made; never writable.

    The names and values ``ReadOnlyAttrs`` of a committed version shows (the
    format's ``raw_data``/``chunks`` on datasets, ``prev_version``,
    ``committed`` and ``timestamp`` on a version's group, and the user's).
    Array values are returned as copies.

    Raises
    ------
    ReadOnlyError
        From every write (``attrs[k] = v``, ``del``, ``create``, ``modify``).
    """

    __slots__ = ("_values",)

    def __init__(self, values: dict[str, Any]):
        self._values = values

    def __getitem__(self, key: str) -> Any:
        value = self._values[key]
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


def _attrs(obj) -> dict[str, Any]:
    return {key: obj.attrs[key] for key in obj.attrs}


class _Tree:
    """The groups of one version, read once: paths (h5py's ``visit`` order), kinds, members, attributes.

    Paths are relative to the version's group (``""`` is the group itself).

    Raises
    ------
    VersionNotFoundError
        The version's group is not in the file (deleted since it was listed).
    """

    __slots__ = ("version", "root", "order", "kinds", "members", "attrs")

    def __init__(self, f: h5py.File, version: str):
        group = f.get(version_path(version))
        if not isinstance(group, h5py.Group):
            raise VersionNotFoundError(f"{f.filename!r}: version {version!r} was deleted; open another version")
        self.version, self.root = version, group.name
        self.order: list[str] = []
        self.kinds: dict[str, str] = {"": "group"}
        self.members: dict[str, list[str]] = {}
        self.attrs: dict[str, dict] = {}
        # Walked by links, depth first in name order (h5py's ``visit`` order), each member's
        # kind asked of its object header (H5Oget_info, basic fields): h5py's ``visit`` and
        # ``get(getclass=True)`` ask for every field, which decodes a virtual dataset's
        # mappings (2.5 ms for 10,000).
        self._walk(group, "")

    def _walk(self, sub: h5py.Group, path: str) -> None:
        self.members[path] = list(sub.keys())
        self.attrs[path] = _attrs(sub)
        for name in sorted(self.members[path], key=lambda n: n.encode("utf-8", "surrogateescape")):
            member = f"{path}/{name}" if path else name
            kind = object_info_by_name(sub.id, name.encode("utf-8", "surrogateescape"))[1]
            self.order.append(member)
            if kind == h5o.TYPE_GROUP:
                self.kinds[member] = "group"
                self._walk(sub[name], member)
            else:
                self.kinds[member] = "dataset"

    def name(self, path: str) -> str:
        """Absolute HDF5 path of ``path``."""
        return f"{self.root}/{path}" if path else self.root

    def below(self, path: str) -> list[str]:
        """Paths under ``path`` in visit order, relative to it."""
        if not path:
            return list(self.order)
        prefix = path + "/"
        return [p[len(prefix):] for p in self.order if p.startswith(prefix)]


class SharedVersionedFile:
    """The committed versions of a file, read while other processes write it.

    Made by :meth:`VersionedHDF5File.open <xarray_vhdf5.versions.file.VersionedHDF5File.open>`;
    see the module for what is held and what is read when. Answers
    ``VersionedHDF5File``'s read API; every call that needs the version list
    reads the file's ``writes`` counter first (16 bytes) and lists the
    versions again, under the file's lock through a fresh handle, when
    another process wrote the file since.

    Parameters
    ----------
    path : str or os.PathLike
        The versioned HDF5 file.
    verify : bool, keyword-only
        Datasets check each chunk they read against the hash table's SHA-256
        digest (:class:`~xarray_vhdf5.errors.CorruptFileError` on a mismatch).
        Not for datasets read through libhdf5 (variable-length strings, filters
        without a decoder here).

    Raises
    ------
    FileNotFoundError
        ``path`` does not exist.
    NotHDF5Error
        ``path`` is not an HDF5 file.
    NotVersionedError
        The file has no version history.
    IncompatibleDataError
        The file was written by a newer format (``data_version`` > 4).
    FileBusyError
        A writer held the file past the reader's timeout (``VHDF5_LOCK_TIMEOUT``).
    TypeError
        ``path`` is not a path (an open ``h5py.File``: use ``VersionedHDF5File(f)``).
    """

    def __init__(self, path: str | os.PathLike, *, verify: bool = False):
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(
                f"VersionedHDF5File.open takes a path, got {type(path).__name__}; wrap an open h5py "
                "file with VersionedHDF5File(f) instead")
        self.path = os.path.abspath(os.fspath(path))
        self.verify = bool(verify)
        self._shared = SharedFile(self.path, verify=self.verify)
        self._closed = False
        self._listing: _Registry | None = None
        self._datasets: weakref.WeakSet = weakref.WeakSet()  # their manifests' descriptors, closed by close()
        # Version trees and datasets got before, by (name, timestamp): a committed version
        # never changes (moved chunks are resolved again at read, SharedFile.read).
        self._cache = _Lru(CACHE_BYTES)
        with self._handle():  # the first listing: fails here on a file that is not versioned
            pass

    # -- the file's state --------------------------------------------------------------
    def _token(self) -> tuple:
        """The file's ``writes`` counter, or for a file without counters its inode, mtime and size."""
        return self._counters()[0]

    def _counters(self) -> tuple[tuple, tuple]:
        """``(_token(), moves)``: the ``moves`` counter (chunks moved: datasets got before are stale)."""
        offset = self._shared.offset
        if offset is not None:
            raw = file_locks(self.path).pread(16, offset)
            if len(raw) == 16:
                counters = generation.read_at_bytes(raw)
                return ("writes", counters.writes), ("moves", counters.moves)
        st = os.stat(self.path)
        token = ("stat", st.st_ino, st.st_mtime_ns, st.st_size)
        return token, token

    @contextlib.contextmanager
    def _handle(self) -> Iterator[h5py.File]:
        """A fresh read-only handle under the ``WRITE`` lock (shared); the version list brought up to date."""
        self._check_open()
        with self._shared.open(hint=_HINT) as f:
            token = self._token()  # under the lock: no writer changes it meanwhile
            if self._listing is None or self._listing.token != token:
                listing = _Registry(f, token)
                if listing.data_version > DATA_VERSION:
                    raise IncompatibleDataError(
                        f"{self.path!r} has data_version {listing.data_version}; this package reads "
                        f"up to {DATA_VERSION}: upgrade xarray_vhdf5")
                self._listing = listing
            yield f

    def _versions(self) -> _Registry:
        """The version list, read again first if another process wrote the file since."""
        self._check_open()
        if self._token() != self._listing.token:
            with self._handle():
                pass
        return self._listing

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedFileError(f"the reader of {self.path!r} is closed; open it again with VersionedHDF5File.open()")

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._closed

    def close(self) -> None:
        """Stop reading: later calls, and reads of the objects it returned, raise ``ClosedFileError``.

        Closes the file descriptors its datasets' manifests opened (no HDF5
        handle is held between calls).
        """
        self._closed = True
        for ds in list(self._datasets):
            if ds.manifest is not None:
                ds.manifest.close()

    def __enter__(self) -> SharedVersionedFile:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        if self._closed:
            return "<Closed SharedVersionedFile>"
        return f'<SharedVersionedFile "{self.path}" (read-only, shared), {len(self._listing)} versions>'

    # -- the history ---------------------------------------------------------------------
    @property
    def versions(self) -> list[str]:
        """Names of the committed versions, oldest first (as ``VersionedHDF5File.versions``)."""
        return self._versions().names()

    @property
    def current_version(self) -> str:
        """Name of the current version (``"__first_version__"`` before any commit)."""
        return self._versions().current_version

    @current_version.setter
    def current_version(self, name: str) -> None:
        raise ReadOnlyError(f"cannot set the current version of {self.path!r}: {_READ_ONLY}")

    @property
    def data_version_identifier(self) -> int:
        """The format's ``data_version`` attribute (4 for files this package writes)."""
        return self._versions().data_version

    def __iter__(self) -> Iterator[str]:
        return iter(self.versions)

    def __len__(self) -> int:
        return len(self._versions())

    def __contains__(self, name: object) -> bool:
        return name in self._versions()

    def resolve(self, key: VersionKey) -> str:
        """Name of the version ``key`` designates (see :meth:`__getitem__`).

        Raises
        ------
        VersionNotFoundError
            No such version; ``IndexError`` for a positive int, ``VersionKeyTypeError``
            for a key of another type, as ``VersionedHDF5File.resolve``.
        ClosedFileError
            The reader is closed.
        """
        return self._versions().resolve(key)

    def version_info(self, key: VersionKey) -> VersionInfo:
        """Metadata (name, prev_version, timestamp) of a version; raises as :meth:`resolve`."""
        listing = self._versions()
        return listing.info(listing.resolve(key))

    def __getitem__(self, key: VersionKey) -> SharedVersionGroup:
        """The committed version ``key``: a snapshot of its group tree, read-only.

        Parameters
        ----------
        key : str, int, datetime, numpy.datetime64 or None
            A name; ``None`` or ``0`` for the current version; ``-n`` for the
            n-th ancestor of the current version; a timestamp for the version
            at that time or the latest before it.

        Raises
        ------
        VersionNotFoundError
            No such version (``KeyError``; the message lists existing ones).
        ClosedFileError
            The reader is closed.
        FileBusyError
            A writer held the file past the reader's timeout.
        """
        listing = self._versions()
        name = listing.resolve(key)
        ident = (name, listing.info(name).timestamp)
        tree = self._cache.get(("tree", ident))
        if tree is None:
            with self._handle() as f:
                name = self._listing.resolve(key)  # the listing may have been read again
                ident = (name, self._listing.info(name).timestamp)
                tree = _Tree(f, name)
            self._cache.put(("tree", ident), tree, 1024)
        return SharedVersionGroup(self, tree)

    def get_version_by_name(self, version: str) -> SharedVersionGroup:
        """The committed version named ``version`` (``""`` or None: the current one)."""
        return self[version or None]

    def get_version_by_timestamp(self, timestamp, exact: bool = False) -> SharedVersionGroup:
        """The version committed at ``timestamp``, else (``exact=False``) the latest before.

        Raises
        ------
        VersionNotFoundError
            Every version is newer (or, ``exact``, none has that timestamp).
        """
        with self._handle() as f:
            return SharedVersionGroup(self, _Tree(f, self._listing.at_time(timestamp, exact=exact)))

    def get_diff(self, name: str, version1: VersionKey, version2: VersionKey) -> dict:
        """The chunks of dataset ``name`` that differ between two versions, with their data.

        As ``VersionedHDF5File.get_diff`` (:func:`~xarray_vhdf5.versions.rebuild.chunk_diff`),
        read through one fresh handle under the file's lock.

        Returns
        -------
        dict of ndindex.Tuple to (numpy.ndarray or None, numpy.ndarray or None)
            Per differing stored region (points), its data in each version.

        Raises
        ------
        VersionNotFoundError
            No such version.
        KeyError
            ``name`` is not a dataset of one of the versions.
        IncompatibleDataError
            ``name`` is not a versioned (chunk-mapped) dataset.
        """
        with self._handle() as f:
            datasets = []
            for key in (version1, version2):
                version = self._listing.resolve(key)
                obj = f[version_path(version)].get(name)
                if not isinstance(obj, h5py.Dataset):
                    raise KeyError(f"no dataset {name!r} in version {version!r}")
                datasets.append(obj)
            return chunk_diff(*datasets)

    def _refuse(self, *args, **kwargs):
        raise ReadOnlyError(f"{self.path!r} is {_READ_ONLY}")

    stage_version = delete_versions = __delitem__ = rebuild_hashtables = _refuse
    rebuild_object_dtype_hashtables = _refuse

    # -- datasets --------------------------------------------------------------------------
    def _datasets_of(self, tree: _Tree, paths: list[str]) -> list[SharedVersionDataset]:
        """The datasets at ``paths`` of ``tree``, resolved through one fresh handle."""
        if not paths:
            return []
        listing = self._versions()
        try:  # metadata are a snapshot: got again after chunks moved (modify_metadata, deletions)
            ident = (tree.version, listing.info(tree.version).timestamp, self._counters()[1])
        except VersionNotFoundError:
            ident = None
        found = {path: self._cache.get(("dataset", ident, path)) for path in paths} if ident else {}
        missing = [path for path in paths if found.get(path) is None]
        if missing:
            with self._handle() as f:
                for path in missing:
                    found[path] = made = SharedVersionDataset(self, tree, path, f)
                    self._datasets.add(made)
                    if ident is not None:  # chunks that move later are resolved again at read
                        size = made.manifest.slots.nbytes + 32 * made.manifest.rows.size if made.manifest else 0
                        self._cache.put(("dataset", ident, path), made, 1024 + size)
        return [found[path] for path in paths]


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

    __slots__ = ("_reader", "_tree", "_path")

    def __init__(self, reader: SharedVersionedFile, tree: _Tree, path: str = ""):
        self._reader, self._tree, self._path = reader, tree, path

    version = property(lambda self: self._tree.version, doc="The version's name.")
    name = property(lambda self: self._tree.name(self._path), doc="Absolute HDF5 path of the group.")
    attrs = property(lambda self: SharedAttrs(self._tree.attrs[self._path]),
                     doc="The group's attributes (a version's root: the version's), read-only.")

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
            parts = path[len(root):].split("/")
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
        return [SharedVersionGroup(self._reader, self._tree, r) if kinds[r] == "group" else next(datasets)
                for r in rels]

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


def _snapshot(name: str, doc: str) -> property:
    return property(lambda self: self._meta[name], doc=doc)


class SharedVersionDataset:
    """A dataset of a committed version: metadata read when it was got, points read on demand.

    Made by :class:`SharedVersionGroup`, inside a fresh handle under the
    file's lock: the metadata (``shape``, ``dtype``, ``chunks``, ``fillvalue``,
    filters, ``maxshape``, ``attrs``) are a snapshot, and so is the chunk
    manifest (:func:`~xarray_vhdf5.backend.manifest.resolve_manifest`). Indexing
    follows h5py (ints, slices with positive steps, one increasing list or
    array of ints or a boolean array, ``...``, field names of a compound dtype,
    a boolean mask of the dataset's shape; ``ds[()]`` reads everything) and
    reads only the chunks the selection touches, as bytes at their offsets,
    with no HDF5 handle; when chunks moved since (versions deleted,
    ``modify_metadata``) the manifest is resolved again first. Without a
    manifest (``manifest`` None: variable-length strings, or a filter that
    cannot be decoded here) each read opens a fresh handle under the lock.

    After ``modify_metadata`` changed the dataset, points read are those it
    stored (its dtype, fill value); the metadata stay the snapshot: get the
    dataset again for new ones.

    Raises
    ------
    VersionNotFoundError
        From a read once the version was deleted.
    CorruptFileError
        From a read of a chunk that does not decode (or, ``verify``, whose
        SHA-256 differs from the hash table's).
    ClosedFileError
        From a read once the reader is closed.
    FileBusyError
        From a read that waited for a writer past the reader's timeout.
    ReadOnlyError
        From every write.
    """

    __slots__ = ("_reader", "_tree", "_path", "_meta", "name", "version", "path", "manifest", "resolved",
                 "_lock", "__weakref__")

    def __init__(self, reader: SharedVersionedFile, tree: _Tree, path: str, f: h5py.File):
        self._reader, self._tree, self._path = reader, tree, path
        self.name = self.path = tree.name(path)  # ``path``: for SharedFile.read
        self.version = tree.version
        self._lock = threading.Lock()
        stored = chunkmaps.load(f, tree.version, path)
        if stored is not None:  # the commit's stored map: the virtual dataset is not opened
            raw = stored.raw_data
            self._meta = {
                "shape": stored.shape, "dtype": raw.dtype, "maxshape": stored.shape, "chunks": stored.chunks,
                "fillvalue": reported_fillvalue(raw.dtype, raw.fillvalue),
                "compression": raw.compression, "compression_opts": raw.compression_opts, "shuffle": raw.shuffle,
                "fletcher32": raw.fletcher32, "scaleoffset": raw.scaleoffset, "attrs": stored.attrs,
            }
            manifest = stored.manifest(self.name, verify=reader.verify)
            self.manifest = manifest if manifest.supported else None
            self.resolved = reader._shared.stamp()
            return
        vds = version_dataset(f, tree.version, self.name)
        chunks, raw_path = version_dataset_layout(vds)
        raw = f[raw_path]
        dtype = vds.dtype
        self._meta = {
            "shape": vds.shape, "dtype": dtype, "maxshape": vds.maxshape, "chunks": tuple(int(c) for c in chunks),
            "fillvalue": reported_fillvalue(dtype, None if is_vlen_string_dtype(dtype) else raw.fillvalue),
            "compression": raw.compression, "compression_opts": raw.compression_opts, "shuffle": raw.shuffle,
            "fletcher32": raw.fletcher32, "scaleoffset": raw.scaleoffset, "attrs": _attrs(vds),
        }
        manifest = None
        if dtype.kind != "O" and vds.is_virtual:
            manifest = resolve_manifest(vds, verify=reader.verify,
                                        addresses=chunkmaps.address_lookup(f, path, raw))
            if not manifest.supported:
                manifest = None
        self.manifest = manifest
        self.resolved = reader._shared.stamp()

    shape = _snapshot("shape", "Shape, in points (tuple of int).")
    dtype = _snapshot("dtype", "The points' dtype (numpy.dtype).")
    maxshape = _snapshot("maxshape", "The virtual dataset's maxshape (tuple of int or None).")
    chunks = _snapshot("chunks", "Chunk shape in points: the unit of deduplication (tuple of int).")
    fillvalue = _snapshot("fillvalue", "As h5py reports it: raw_data's, ``b''`` for variable-length strings.")
    compression = _snapshot("compression", "raw_data's compression filter name (h5py's), or None.")
    compression_opts = _snapshot("compression_opts", "raw_data's compression options (h5py's).")
    shuffle = _snapshot("shuffle", "Whether raw_data has the shuffle filter.")
    fletcher32 = _snapshot("fletcher32", "Whether raw_data has the Fletcher-32 checksum filter.")
    scaleoffset = _snapshot("scaleoffset", "raw_data's scale-offset filter setting, or None.")
    ndim = property(lambda self: len(self.shape), doc="Number of axes.")
    size = property(lambda self: int(np.prod(self.shape, dtype=np.int64)), doc="Number of points.")
    nbytes = property(lambda self: self.size * self.dtype.itemsize, doc="Bytes of the points in memory.")

    @property
    def attrs(self) -> SharedAttrs:
        """The dataset's attributes, read-only (with the format's ``raw_data`` and ``chunks``)."""
        return SharedAttrs(self._meta["attrs"])

    @property
    def parent(self) -> SharedVersionGroup:
        """The group holding this dataset, in the same version."""
        return SharedVersionGroup(self._reader, self._tree, self._path.rpartition("/")[0])

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("Attempt to take len() of scalar dataset")
        return self.shape[0]

    def len(self) -> int:
        """Length of the first axis (h5py's ``len()``)."""
        return len(self)

    def __iter__(self) -> Iterator:
        """Iterate over the first axis, as h5py datasets do."""
        for i in range(len(self)):
            yield self[i]

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        arr = np.asarray(self[()])
        return arr if dtype is None else arr.astype(dtype)

    def iter_chunks(self, sel=None) -> Iterator[tuple[slice, ...]]:
        """Slices of the dataset's chunks meeting ``sel`` (h5py's ``iter_chunks``, over ``chunks``)."""
        return chunk_slices(self.shape, self.chunks, sel)

    def __getitem__(self, args):
        """Read the points ``args`` selects (h5py's rules and results).

        Returns
        -------
        numpy.ndarray or numpy scalar
            Of ``dtype`` (bytes objects for variable-length strings, as h5py);
            a numpy scalar when every axis is indexed by an int.

        Raises
        ------
        IndexError, ValueError, TypeError
            As h5py for an invalid selection (out of bounds, a negative step,
            an unsorted list, two lists, ``None``, a field name of a
            non-compound dtype).
        VersionNotFoundError, CorruptFileError, ClosedFileError, FileBusyError
            See the class.
        """
        self._reader._check_open()
        args = args if isinstance(args, tuple) else (args,)
        if any(a is None for a in args):
            raise TypeError("Indexing with None (or np.newaxis) is not supported")
        names = tuple(a for a in args if isinstance(a, str))
        if names:
            if self.dtype.names is None:
                raise ValueError("Field names only allowed for compound types")
            rest = tuple(a for a in args if not isinstance(a, str))
            out = FieldsView(self, names[0] if len(names) == 1 else list(names))[rest]
            return out[()] if out.shape == () else out
        if self.manifest is None:
            return self._read_through_hdf5(args)
        selection = _selections.select(self.shape, args)  # h5py's checks, and the result's shape
        if isinstance(selection, _selections.PointSelection):  # a boolean mask of the whole shape
            out = self._read(())[args[0]]
        else:
            out = self._read(self._outer_key(args))
        out = out.reshape(selection.array_shape)
        return out[()] if out.shape == () else out

    def _outer_key(self, args: tuple) -> tuple:
        """``args`` h5py accepted, as :meth:`ChunkManifest.read <xarray_vhdf5.backend.manifest.ChunkManifest.read>` takes it."""
        if any(a is Ellipsis for a in args):
            at = next(i for i, a in enumerate(args) if a is Ellipsis)
            args = args[:at] + (slice(None),) * (self.ndim - len(args) + 1) + args[at + 1:]
        key = []
        for axis, a in enumerate(args):
            if isinstance(a, (slice, int, np.integer)):
                key.append(a)
                continue
            arr = np.asarray(a)
            if arr.dtype == bool:
                arr = np.flatnonzero(arr)
            arr = arr.astype(np.intp).reshape(-1)
            key.append(np.where(arr < 0, arr + self.shape[axis], arr))
        return tuple(key)

    def _read(self, key: tuple) -> np.ndarray:
        manifest = self.manifest
        try:
            out = self._reader._shared.read(self, key)
        except UnsupportedError:  # resolved again after modify_metadata gave it an undecodable filter
            self.manifest = None
            return np.asarray(self._read_through_hdf5(key))
        if self.manifest is not manifest:  # resolved again: chunks moved (versions deleted)
            with self._reader._shared.open(hint=_HINT) as f:
                self._same_version(f)
        return out

    def _read_through_hdf5(self, args: tuple):
        """``args`` read by h5py from the version's dataset, through a fresh handle under the lock."""
        with self._reader._shared.open(hint=_HINT) as f:
            return self._same_version(f)[args]

    def _same_version(self, f: h5py.File) -> h5py.Dataset:
        """The dataset in ``f``, if its version is the one it was got from (not deleted, not made again).

        Raises
        ------
        VersionNotFoundError
            The version was deleted, or deleted and a version of the same name
            committed since (another timestamp).
        """
        vds = version_dataset(f, self.version, self.name)
        if f[version_path(self.version)].attrs.get("timestamp") != self._tree.attrs[""].get("timestamp"):
            raise VersionNotFoundError(
                f"{self._reader.path!r}: version {self.version!r} was deleted while this dataset of it was "
                "held (a new version of that name was committed since); get it again")
        return vds

    def read_direct(self, dest: np.ndarray, source_sel=None, dest_sel=None) -> None:
        """Read ``self[source_sel]`` into ``dest[dest_sel]`` (h5py's ``read_direct``)."""
        dest[() if dest_sel is None else dest_sel] = self[() if source_sel is None else source_sel]

    def fields(self, names) -> FieldsView:
        """h5py's ``fields()`` view of a compound dataset: ``ds.fields(["a"])[sel]``."""
        return FieldsView(self, names)

    def asstr(self, encoding: str | None = None, errors: str = "strict") -> _Converted:
        """h5py's ``asstr()``: a view whose reads decode the strings to ``str``.

        Raises
        ------
        TypeError
            The dataset does not hold strings.
        """
        info = h5py.check_string_dtype(self.dtype)
        if info is None:
            raise TypeError("dset.asstr() can only be used on datasets with an HDF5 string datatype")
        encoding = encoding or info.encoding

        def decode(data):
            if isinstance(data, bytes):
                return data.decode(encoding, errors)
            return np.array([b.decode(encoding, errors) for b in data.flat], dtype=object).reshape(data.shape)

        return _Converted(self, decode, np.dtype(object))

    def astype(self, dtype) -> _Converted:
        """h5py's ``astype()``: a view whose reads convert the points to ``dtype``."""
        dtype = np.dtype(dtype)
        return _Converted(self, lambda data: np.asarray(data).astype(dtype)[()], dtype)

    def __eq__(self, other) -> bool:
        if not isinstance(other, SharedVersionDataset):
            return NotImplemented
        return (self._reader.path, self.name) == (other._reader.path, other.name)

    def __hash__(self) -> int:
        return hash((self._reader.path, self.name))

    def _refuse(self, *args, **kwargs):
        raise ReadOnlyError(f"cannot write to {self.name!r}: {_READ_ONLY}")

    __setitem__ = resize = write_direct = _refuse

    def __repr__(self) -> str:
        return (f"<SharedVersionDataset {self.name!r}: shape {self.shape}, type {self.dtype.str!r} "
                f"(read-only, shared)>")


class _Converted:
    """A read view of a dataset whose points are converted on read (``asstr()``, ``astype()``)."""

    def __init__(self, dataset: SharedVersionDataset, convert: Callable, dtype: np.dtype):
        self._dataset, self._convert, self.dtype = dataset, convert, dtype

    def __getitem__(self, args):
        return self._convert(self._dataset[args])

    def __len__(self) -> int:
        return len(self._dataset)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        arr = np.asarray(self[()])
        return arr if dtype is None else arr.astype(dtype)
