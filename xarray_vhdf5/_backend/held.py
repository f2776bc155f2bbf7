"""Datasets a file handle holds open between its commits: hash tables and raw_data.

libhdf5 keeps a dataset's chunk cache while any handle to it is open and frees
it with the last one. A commit opens, reads and writes a dataset's
``hash_table`` and ``raw_data``, then the next stage opens them again:

- checking a hash table (:func:`~xarray_vhdf5._backend.hashtable.table_state`,
  on every commit) from a fresh handle reads and decompresses its whole last
  chunk (4096 rows), from a held one it is in libhdf5's chunk cache;
- an append rewrites the partial last chunk of raw_data and the next one reads
  it back (``resize``); HDF5's default chunk cache (1 MiB) does not hold a
  chunk of a few MiB, so each such chunk went to disk and back. raw_data is
  held open with a chunk cache of :data:`CACHED_CHUNKS` chunks (at most
  :data:`MAX_CACHE_BYTES`), which both hit.

A held handle is checked against the object linked at its path before use (a
dataset rebuilt by another library is a new object) and closes with the
:class:`OpenDatasets` holding it, i.e. with its
:class:`~xarray_vhdf5.VersionedHDF5File`. Nothing here changes what is
written.
"""

from __future__ import annotations

import math

import h5py
from h5py import h5d, h5p

from .h5objects import object_address_by_name
from .hashtable import hash_table_path, unreadable_hash_table

__all__ = ["CACHED_CHUNKS", "MAX_CACHE_BYTES", "HeldDataset", "OpenDatasets"]

#: Chunks of raw_data the held handle's chunk cache holds.
CACHED_CHUNKS = 4
#: Upper bound of that cache, bytes.
MAX_CACHE_BYTES = 64 * 1024 * 1024


class HeldDataset(h5py.Dataset):
    """A raw_data :class:`OpenDatasets` holds: ``name``, ``dtype`` and ``fillvalue`` asked once.

    h5py asks libhdf5 again on every access of these (``H5Iget_name``, the
    datatype, the fill value of the creation property list, and a commit
    reads them about ten times). A held handle is checked against the
    object linked at its path before each use, so its name is that path; a
    dataset's datatype and fill value are fixed when it is created.

    Parameters
    ----------
    bind : h5py.h5d.DatasetID
        The open dataset.
    path : str
        The absolute path it was opened by.
    address : int
        Its object address (as :func:`~.h5objects.object_address` gives it).
    """

    def __init__(self, bind: h5d.DatasetID, path: str, address: int):
        super().__init__(bind)
        #: The object address, fixed while the dataset is open.
        self.address = address
        self._held_name = path
        self._held_dtype = None
        self._held_fill = None
        self._held_type = None

    @property
    def name(self) -> str:
        return self._held_name

    @property
    def dtype(self):
        if self._held_dtype is None:
            self._held_dtype = self.id.dtype
        return self._held_dtype

    @property
    def file_type(self) -> h5py.h5t.TypeID:
        """Its HDF5 datatype (``id.get_type()``, asked once)."""
        if self._held_type is None:
            self._held_type = self.id.get_type()
        return self._held_type

    @property
    def fillvalue(self):
        if self._held_fill is None:
            self._held_fill = (super().fillvalue,)
        return self._held_fill[0]


class OpenDatasets:
    """The ``hash_table`` and ``raw_data`` datasets one file handle holds open."""

    def __init__(self) -> None:
        self._held: dict[bytes, tuple[int, h5d.DatasetID]] = {}
        self._wrappers: dict[bytes, h5py.Dataset] = {}
        #: ``(path, object address)`` -> id of a virtual dataset this handle's last commit made.
        self._made: dict[tuple[str, int], h5d.DatasetID] = {}

    def keep_made(self, made: dict[tuple[str, int], h5d.DatasetID]) -> None:
        """Hold the virtual datasets the last commit made (``ChunkMapCache.commit``), in place of the previous ones."""
        self._made = made

    def made(self, path: bytes, address: int) -> h5d.DatasetID | None:
        """The id the last commit made the virtual dataset at ``path`` with, if it is still the object there.

        ``address``: the object's address now (``UnopenedDataset.address``).
        Opening a virtual dataset makes libhdf5 decode every mapping; the id
        the commit created is still open. While an id is
        open libhdf5 does not free the object's space, so the same address is
        the same object.
        """
        vid = self._made.get((path.decode(), address))
        return vid if vid is not None and vid.valid else None

    def _get(self, loc, path: bytes, chunk_bytes: int | None = None) -> h5d.DatasetID:
        addr = object_address_by_name(loc, path)
        held = self._held.get(path)
        if held is not None and held[0] == addr and held[1].valid:
            return held[1]
        dapl = None
        if chunk_bytes is not None:  # raw_data: a chunk cache of a few chunks
            dapl = h5p.create(h5p.DATASET_ACCESS)
            nslots, default_nbytes, w0 = dapl.get_chunk_cache()
            nbytes = min(MAX_CACHE_BYTES, CACHED_CHUNKS * int(chunk_bytes))
            dapl.set_chunk_cache(nslots, max(nbytes, default_nbytes), w0)
        dsid = h5d.open(loc, path, dapl=dapl)
        self._held[path] = (addr, dsid)
        return dsid

    def hash_table_id(self, raw_data: h5py.Dataset) -> h5d.DatasetID:
        """The open ``hash_table`` beside ``raw_data``.

        Raises
        ------
        KeyError
            No ``hash_table`` beside it.
        CorruptFileError
            One is linked there but libhdf5 cannot open it
            (:func:`~xarray_vhdf5._backend.hashtable.unreadable_hash_table`).
        """
        try:
            return self._get(raw_data.id, hash_table_path(raw_data))
        except KeyError as exc:
            raise unreadable_hash_table(raw_data, exc) from exc

    def hash_table(self, raw_data: h5py.Dataset) -> tuple[h5py.Dataset, int]:
        """The open ``hash_table`` beside ``raw_data`` as an h5py dataset, and its object address.

        Raises
        ------
        KeyError
            No ``hash_table`` beside it.
        CorruptFileError
            One there that libhdf5 cannot open (:meth:`hash_table_id`).
        """
        path = hash_table_path(raw_data)
        dsid = self.hash_table_id(raw_data)
        wrapper = self._wrappers.get(path)
        if wrapper is None or wrapper.id is not dsid:
            wrapper = self._wrappers[path] = h5py.Dataset(dsid)
        return wrapper, self._held[path][0]

    def raw_data(self, loc, path: str, chunk_bytes: int) -> h5py.Dataset:
        """The open raw_data at absolute ``path`` (``loc``: any object of the file).

        ``chunk_bytes``: the size of one of its chunks in bytes (points x item
        size), which sets its chunk cache (:data:`CACHED_CHUNKS` chunks, at
        least HDF5's default, at most :data:`MAX_CACHE_BYTES`). Only the first
        open of a dataset decides its cache: a handle opened elsewhere before
        keeps libhdf5's default.

        Raises
        ------
        KeyError
            Nothing at ``path``.
        """
        bpath = path.encode()
        return self._wrapper(path, self._get(loc, bpath, chunk_bytes))

    def _wrapper(self, path: str, dsid: h5d.DatasetID) -> HeldDataset:
        """The held dataset ``dsid`` at ``path`` as an h5py dataset (made once per id)."""
        bpath = path.encode()
        wrapper = self._wrappers.get(bpath)
        if wrapper is None or wrapper.id is not dsid:
            wrapper = self._wrappers[bpath] = HeldDataset(dsid, path, self._held[bpath][0])
        return wrapper

    def raw_data_of(self, loc, path: str) -> h5py.Dataset | None:
        """:meth:`raw_data` sized from the dataset's own chunk shape and datatype; None if not a chunked dataset.

        For a caller that knows raw_data's path (absolute) but not its datatype
        (a virtual dataset left unopened has the same, ``docs/format.md``).
        Opened once with libhdf5's default chunk cache, or, when
        :data:`CACHED_CHUNKS` of its chunks (bytes: points x item size) do not
        fit in that, once with a cache that holds them. ``loc``: any object of
        the file. None also when nothing is at ``path``; no error is raised.
        """
        bpath = path.encode()
        try:
            addr = object_address_by_name(loc, bpath)
        except (KeyError, ValueError):  # nothing there
            return None
        held = self._held.get(bpath)
        if held is not None and held[0] == addr and held[1].valid:  # its cache sized at its first open
            return self._wrapper(path, held[1])
        try:
            probe = h5d.open(loc, bpath)
        except (KeyError, ValueError, TypeError):  # not a dataset
            return None
        dcpl = probe.get_create_plist()
        if dcpl.get_layout() != h5d.CHUNKED:
            return None
        chunk_bytes = math.prod(dcpl.get_chunk()) * probe.get_type().get_size()
        if min(MAX_CACHE_BYTES, CACHED_CHUNKS * chunk_bytes) <= probe.get_access_plist().get_chunk_cache()[1]:
            self._held[bpath] = (addr, probe)  # the default cache holds enough: one open
            return self._wrapper(path, probe)
        probe.close()  # opened again with a larger cache (libhdf5 sizes it at a dataset's first open)
        return self.raw_data(loc, path, chunk_bytes)

    def clear(self) -> None:
        """Let go of every handle (they close when no other reference remains)."""
        self._held = {}
        self._wrappers = {}
        self._made = {}
