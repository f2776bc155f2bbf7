"""A committed version's dataset as a shared reader returns it: metadata snapshot, points on demand.

:class:`SharedVersionDataset` holds the dataset's metadata and its manifest of
byte ranges (from the stored chunk map, :mod:`~xarray_vhdf5._versions.chunkmaps`,
else decoded from the virtual dataset) and reads points through
:meth:`~xarray_vhdf5._versions.sharing.SharedFile.read`. Made by
:class:`~xarray_vhdf5._versions.reader.SharedVersionedFile`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import h5py
import numpy as np
from h5py._hl import selections as _selections

from .._backend.chunkmap import version_dataset_layout
from .._backend.chunks import chunk_grid_shape
from .._backend.h5attrs import UNREAD, object_attrs, read_attr_of
from .._backend.h5objects import open_object
from .._backend.hashing import is_vlen_string_dtype
from .._backend.manifest_resolve import resolve_manifest
from .._backend.names import NETCDF_REFERENCE_ATTRS
from .._backend.raw_data import reported_fillvalue
from .._wrappers.dataset_api import FieldsView, chunk_slices
from ..errors import ReadOnlyError, UnsupportedError, VersionNotFoundError
from . import chunkmaps
from .reader_tree import _HINT, _READ_ONLY, SharedAttrs, SharedVersionGroup, _Tree
from .sharing import version_dataset, version_timestamp

if TYPE_CHECKING:  # for annotations only: the reader module imports this one
    from .reader import SharedVersionedFile

__all__ = ["SharedVersionDataset", "outer_key"]


def _snapshot(name: str, doc: str) -> property:
    return property(lambda self: self._meta[name], doc=doc)


def outer_key(args: tuple, shape: tuple[int, ...]) -> tuple:
    """``args`` h5py accepted for a dataset of ``shape``, in the form
    :meth:`ChunkManifest.read <xarray_vhdf5._backend.manifest.ChunkManifest.read>` takes:
    ``...`` expanded, index arrays as non-negative ``intp`` vectors, booleans as their indices."""
    if any(a is Ellipsis for a in args):
        at = next(i for i, a in enumerate(args) if a is Ellipsis)
        args = args[:at] + (slice(None),) * (len(shape) - len(args) + 1) + args[at + 1 :]
    key: list[Any] = []  # slices, integers and index arrays
    for axis, a in enumerate(args):
        if isinstance(a, (slice, int, np.integer)):
            key.append(a)
            continue
        arr = np.asarray(a)
        if arr.dtype == bool:
            arr = np.flatnonzero(arr)
        arr = arr.astype(np.intp).reshape(-1)
        key.append(np.where(arr < 0, arr + shape[axis], arr))
    return tuple(key)


class SharedVersionDataset:
    """A dataset of a committed version: metadata read when it was got, points read on demand.

    Made by :class:`SharedVersionGroup`, inside a fresh handle under the
    file's lock: the metadata (``shape``, ``dtype``, ``chunks``, ``fillvalue``,
    filters, ``maxshape``, ``attrs``) are a snapshot, and so is the chunk
    manifest (:func:`~xarray_vhdf5._backend.manifest_resolve.resolve_manifest`). Indexing
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

    __slots__ = (
        "__weakref__",
        "_lock",
        "_meta",
        "_path",
        "_reader",
        "_tree",
        "manifest",
        "name",
        "path",
        "resolved",
        "version",
    )

    def __init__(self, reader: SharedVersionedFile, tree: _Tree, path: str, f: h5py.File):
        self._reader, self._tree, self._path = reader, tree, path
        self.name = self.path = tree.name(path)  # ``path``: for SharedFile.read
        self.version = tree.version
        self._lock = threading.Lock()
        stored = chunkmaps.load(f, tree.version, path, defer=NETCDF_REFERENCE_ATTRS)
        if stored is not None:  # the commit's stored map: the virtual dataset is not opened
            raw = stored.raw_data
            self._meta = {
                "shape": stored.shape,
                "dtype": raw.dtype,
                "maxshape": stored.shape,
                "chunks": stored.chunks,
                "fillvalue": reported_fillvalue(raw.dtype, raw.fillvalue),
                "compression": raw.compression,
                "compression_opts": raw.compression_opts,
                "shuffle": raw.shuffle,
                "fletcher32": raw.fletcher32,
                "scaleoffset": raw.scaleoffset,
                "attrs": stored.attrs,
            }
            manifest = stored.manifest(self.name, verify=reader.verify)
            self.manifest = manifest if manifest.supported else None
            self.resolved = reader._shared.stamp()
            return
        # The tree was listed through this handle: the dataset is there. One H5Oopen each.
        vds = open_object(f, self.name, h5py.Dataset)
        if vds is None:
            vds = version_dataset(f, tree.version, self.name)  # raises as it does for a missing one
        chunks, raw_path = version_dataset_layout(vds)
        raw = open_object(f, raw_path, h5py.Dataset)
        if raw is None:
            raw = f[raw_path]  # KeyError, as h5py says it
        dtype = vds.dtype
        attrs = object_attrs(vds, defer=NETCDF_REFERENCE_ATTRS)  # references read by :attr:`attrs`
        self._meta = {
            "shape": vds.shape,
            "dtype": dtype,
            "maxshape": vds.maxshape,
            "chunks": tuple(int(c) for c in chunks),
            "fillvalue": reported_fillvalue(dtype, None if is_vlen_string_dtype(dtype) else raw.fillvalue),
            "compression": raw.compression,
            "compression_opts": raw.compression_opts,
            "shuffle": raw.shuffle,
            "fletcher32": raw.fletcher32,
            "scaleoffset": raw.scaleoffset,
            "attrs": attrs,
        }
        manifest = None
        if dtype.kind != "O" and vds.is_virtual:
            lookup = chunkmaps.address_lookup(f, path, raw)
            manifest = resolve_manifest(vds, verify=reader.verify, addresses=lookup, layout=(chunks, raw))
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
        """The dataset's attributes, read-only (with the format's ``raw_data`` and ``chunks``).

        Those holding object references (netCDF-4's ``DIMENSION_LIST`` and
        ``REFERENCE_LIST``, slow to read) are read when first asked for,
        through a fresh handle, from the version as it is then.
        """
        return SharedAttrs(self._meta["attrs"], self._read_deferred)

    def _read_deferred(self, key: str) -> Any:
        """Attribute ``key``, left unread when the dataset was made; kept once read.

        Raises
        ------
        VersionNotFoundError, ClosedFileError, FileBusyError
            See the class.
        """
        with self._lock:
            value = self._meta["attrs"][key]
            if value is not UNREAD:
                return value
            self._reader._check_open()
            with self._reader._shared.open(hint=_HINT) as f:
                value = read_attr_of(self._same_version(f).id, b".", key)
            self._meta["attrs"][key] = value
            return value

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
            out = self._read(outer_key(args, self.shape))
        out = out.reshape(selection.array_shape)
        return out[()] if out.shape == () else out

    def stored_chunk(self, index: tuple[int, ...]) -> tuple[bytes, int] | None:
        """The file's bytes of chunk ``index`` (see :meth:`ChunkManifest.stored_chunk
        <xarray_vhdf5._backend.manifest.ChunkManifest.stored_chunk>`), read safely while
        versions are deleted (chunks moved: resolved again).

        Raises
        ------
        UnsupportedError
            The dataset is read through libhdf5 (:attr:`manifest` is None).
        VersionNotFoundError, CorruptFileError, ClosedFileError, FileBusyError
            See the class.
        """
        self._reader._check_open()
        if self.manifest is None:
            raise UnsupportedError(f"{self.name}: its chunks are read through libhdf5, not as bytes")
        return self._reader._shared.apply(self, lambda manifest: manifest.stored_chunk(index))

    def decoded_chunk(self, index: tuple[int, ...]) -> np.ndarray:
        """The points of chunk ``index``, shape :attr:`chunks`; past the dataset's edge, the fill value.

        Parameters
        ----------
        index : tuple of int
            Position in the chunk grid (``ceil(shape / chunks)`` per axis).

        Raises
        ------
        IndexError
            ``index`` is outside the chunk grid.
        VersionNotFoundError, CorruptFileError, ClosedFileError, FileBusyError
            See the class.
        """
        self._reader._check_open()
        grid = chunk_grid_shape(self.shape, self.chunks)
        index = tuple(int(i) for i in index)
        if len(index) != len(grid) or not all(0 <= i < g for i, g in zip(index, grid)):
            raise IndexError(f"chunk {index} is outside the chunk grid {grid} of {self.name}")
        if self.manifest is not None:
            try:
                return self._reader._shared.apply(self, lambda manifest: manifest.decoded_chunk(index))
            except UnsupportedError:  # resolved again after modify_metadata gave it an undecodable filter
                self.manifest = None
        region = tuple(slice(i * c, min((i + 1) * c, n)) for i, c, n in zip(index, self.chunks, self.shape))
        data = np.asarray(self[region] if region else self[()])
        if data.shape == tuple(self.chunks):
            return data
        fill = self.fillvalue if self.dtype.kind != "O" else b""
        out = np.full(self.chunks, fill, dtype=data.dtype)
        out[tuple(slice(0, k) for k in data.shape)] = data
        return out

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

        Opened with one ``H5Oopen`` (:func:`~xarray_vhdf5._backend.h5objects.open_object`);
        when nothing opens, :func:`~xarray_vhdf5._versions.sharing.version_dataset` says why.

        Raises
        ------
        VersionNotFoundError
            The version was deleted, or deleted and a version of the same name
            committed since (another timestamp).
        """
        vds = open_object(f, self.name, h5py.Dataset)
        if vds is None:
            vds = version_dataset(f, self.version, self.name)
        if version_timestamp(f, self.version) != self._tree.attrs[""].get("timestamp"):
            raise VersionNotFoundError(
                f"{self._reader.path!r}: version {self.version!r} was deleted while this dataset of it was "
                "held (a new version of that name was committed since); get it again"
            )
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
        return f"<SharedVersionDataset {self.name!r}: shape {self.shape}, type {self.dtype.str!r} (read-only, shared)>"


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
