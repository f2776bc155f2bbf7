"""Stored chunk maps: open a version's dataset without libhdf5 decoding its mappings.

libhdf5 decodes every mapping of a virtual dataset whenever it opens one
(``H5Dopen``) or copies its creation property list, which h5py does for
``ds.attrs``: for a version of 10,000 chunks, two orders of magnitude more than
opening an ordinary chunked dataset and reading a point
(``docs/benchmarks.md``). A commit of this
package already knows where each chunk of the version lies, so it stores
that, in two places of its bookkeeping group ``/__vhdf5__``
(:mod:`~xarray_vhdf5._versions.bookkeeping`), and a reader builds the
dataset's manifest of byte ranges (:class:`~xarray_vhdf5._backend.manifest.ChunkManifest`)
from them, reading the virtual dataset's attributes by index through its
group (:func:`~xarray_vhdf5._backend.h5attrs.read_attrs_of`) and never
opening it:

``chunk_maps/<version>/<dataset path>``
    int32, the dataset's chunk grid (``ceil(shape / chunks)``): per chunk the
    number of the raw_data chunk it maps (its first row divided by the rows a
    chunk holds), -1 for a chunk of fill value (unmapped); in the object
    header up to 32 KB, else chunked and deflated. Attributes ``shape`` (int64, points), ``vds`` and ``raw``
    (the object addresses of the version's virtual dataset and of raw_data
    when the map was written). Written once, by the commit of the version,
    for datasets of at least :data:`MIN_CHUNKS` chunks (smaller ones decode
    fast).
``chunk_addresses/<dataset path>``
    uint64 ``(n, 3)``, one row per raw_data chunk (row ``k`` for raw_data rows
    ``k * chunks[0]`` on): its file offset, stored size in bytes and HDF5
    filter mask; an offset of :data:`UNKNOWN` for a chunk not resolved.
    Attributes ``raw`` and ``table``: the object addresses of raw_data and of
    its hash table. Appended to by each commit (unfiltered, so the last chunk
    is rewritten in place).

Neither is ever the only copy of anything: both restate what the virtual
datasets and raw_data's chunk index say, and each is used only while the
objects it describes are the ones it was written for, else the reader
decodes the mappings as before. Every other writer that changes those
objects replaces one of them:

- a map holds the object addresses of the version's virtual dataset and of
  raw_data, and the version's ``timestamp``: versioned-hdf5's deletion
  compacts raw_data in place but creates a new virtual dataset for every
  version whose chunks moved, and a version deleted and committed again
  under its name has another timestamp;
- an address table holds the addresses of raw_data and of the hash table
  (versioned-hdf5's deletion writes a new hash table), and a row counts only
  below the hash table's ``largest_index`` (the chunks a commit finished
  writing; rows past it are overwritten by the next commit); other rows are
  resolved through libhdf5;
- this package's own chunk-moving mutations (deletion, ``modify_metadata``)
  drop every map and table first (:func:`forget`, from
  :func:`~xarray_vhdf5._versions.mutation.mutating`).
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable

import h5py
import numpy as np
from h5py import h5d, h5g, h5p, h5s, h5t

from .._backend.chunks import chunk_grid_shape
from .._backend.h5attrs import read_attr, read_attrs_of, write_attr
from .._backend.h5objects import object_address, object_address_by_name, open_object
from .._backend.hashtable import committed_chunks, hash_table_path
from .._backend.layout import VERSION_DATA
from .._backend.manifest_resolve import chunk_addresses, manifest_from_starts
from .._backend.rows import read_rows, write_rows
from . import bookkeeping, maplog, smallmaps
from .index import to_micros
from .timestamps import parse_timestamp

__all__ = [
    "MAP_FORMAT",
    "MIN_CHUNKS",
    "UNKNOWN",
    "MapReader",
    "StoredLayout",
    "StoredLayouts",
    "address_lookup",
    "carry",
    "chunk_numbers",
    "forget",
    "has_maps",
    "load",
    "record",
    "stored_addresses",
    "table_owner",
    "timestamp_micros",
]

#: Layout of a map's values (attribute ``format``): 2, int32 chunk numbers. Maps of
#: another format (1: int64 first rows, written only by development builds) are not used.
MAP_FORMAT = 2
#: Datasets with fewer chunks get no stored map (decoding their mappings is cheap).
MIN_CHUNKS = 64
#: Offset of an address row not resolved.
UNKNOWN = np.uint64(2**64 - 1)
_MAPS, _ADDRESSES = "chunk_maps", "chunk_addresses"
_ADDRESS_ROWS = 1024  # HDF5 chunk of an address table, in rows (24 KB)
#: Maps up to this many bytes are stored in their object header (HDF5's compact layout:
#: no chunk index, whose B-tree node alone takes 2-4 KB); larger ones chunked and deflated
#: (written once; with byte shuffle, numbers that mostly count up shrink 10-50x).
_COMPACT_BYTES = 32 * 1024


def chunk_numbers(starts: np.ndarray, rows_per_chunk: int) -> np.ndarray:
    """int32 raw_data chunk numbers (first row // rows per chunk) of a chunk map's first rows ``starts``, -1 kept.

    Of ``starts``' shape; int64 past 2**31 chunks.
    """
    numbers = np.where(starts >= 0, starts // rows_per_chunk, -1)
    if numbers.size and int(numbers.max()) >= 2**31:  # pragma: no cover - 2**31 chunks
        return numbers.astype(np.int64)
    return numbers.astype(np.int32)


_COMPACT_DCPL = h5p.create(h5p.DATASET_CREATE)
_COMPACT_DCPL.set_layout(h5d.COMPACT)
#: Link creation as h5py's: missing groups on the path made, names UTF-8.
_LCPL = h5p.create(h5p.LINK_CREATE)
_LCPL.set_create_intermediate_group(True)
_LCPL.set_char_encoding(h5t.CSET_UTF8)


def _create_map(parent: h5py.Group, name: str, numbers: np.ndarray) -> h5d.DatasetID:
    """Write a map (the module docstring's layout); returns the low-level id (h5py's
    ``create_dataset`` adds Python objects and checks per map)."""
    numbers = np.ascontiguousarray(numbers)
    if numbers.nbytes <= _COMPACT_BYTES:
        space = h5s.create_simple(numbers.shape)
        dsid = h5d.create(parent.id, name.encode(), h5t.py_create(numbers.dtype), space, dcpl=_COMPACT_DCPL)
        dsid.write(h5s.ALL, h5s.ALL, numbers)
        return dsid
    return parent.create_dataset(
        name, data=numbers, chunks=True, compression="gzip", compression_opts=1, shuffle=True
    ).id


class StoredLayout:
    """What a reader needs of one version's dataset, from the stored map: no virtual dataset opened.

    Attributes
    ----------
    shape, chunks : tuple of int
        In points.
    raw_data : h5py.Dataset
        The dataset's raw_data (open in the handle it was loaded through).
    attrs : dict
        The virtual dataset's attributes, as ``dict(vds.attrs)`` (the format's
        ``raw_data`` and ``chunks`` included).
    starts : numpy.ndarray of int64, shape ``ceil(shape / chunks)``
        Per chunk its first row of raw_data, -1 unmapped.
    addresses : callable
        Rows of raw_data (uint64, first rows of chunks) -> their chunks'
        ``(offset, size, filter mask)``, uint64 ``(n, 3)``: from the address
        table, else libhdf5 (while the handle is open).
    """

    __slots__ = ("addresses", "attrs", "chunks", "raw_data", "shape", "starts")

    def __init__(self, shape, chunks, raw_data, attrs, starts, addresses):
        self.shape, self.chunks, self.raw_data, self.attrs = shape, chunks, raw_data, attrs
        self.starts, self.addresses = starts, addresses

    def manifest(self, name: str, verify: bool = False):
        """The :class:`~xarray_vhdf5._backend.manifest.ChunkManifest` of the dataset (``name``: its HDF5 path).

        The virtual dataset's fill value is raw_data's (this package's commits make it so).
        """
        dtype = self.raw_data.dtype
        return manifest_from_starts(
            name,
            self.raw_data,
            self.shape,
            self.chunks,
            dtype,
            np.asarray(self.raw_data.fillvalue, dtype),
            self.starts,
            addresses=self.addresses,
            verify=verify,
        )


def _maps_path(version: str, path: str) -> str:
    return f"{_MAPS}/{version}/{path}"


def _address_path(path: str) -> str:
    return f"{_ADDRESSES}/{path}"


def record(
    f: h5py.File,
    version: str,
    path: str,
    vds_id,
    raw: h5py.Dataset,
    shape: tuple[int, ...],
    chunks: tuple[int, ...],
    slab_indices: np.ndarray,
    slab_offsets: np.ndarray,
    committed_before: int,
    base_version: str | None = None,
    small: smallmaps.Batch | None = None,
) -> bool:
    """Store the map of ``version``'s dataset ``path`` and extend raw_data's address table.

    Called by the commit writing the dataset, inside its mutation, once
    raw_data and the hash table are written (the version is not committed
    yet: should the commit not finish, neither is used, see the module
    docstring).

    Parameters
    ----------
    f : h5py.File
        Open for writing.
    version : str
        The version being committed.
    path : str
        The dataset's path in the version (``"x"``, ``"grp/x"``).
    vds_id : h5py.h5d.DatasetID
        The version's new virtual dataset.
    raw : h5py.Dataset
        Its raw_data.
    shape, chunks : tuple of int
        In points.
    slab_indices, slab_offsets : numpy.ndarray
        The version's chunk map (:func:`~xarray_vhdf5._backend.chunkmap_cache.chunk_map_arrays`):
        1 where a chunk is stored, its first raw_data row (points).
    committed_before : int
        The hash table's ``largest_index`` before this commit: address rows
        from there on are resolved again (an interrupted commit may have
        left rows there that this one overwrote).
    base_version : str, optional
        The committed version the dataset was staged from: its map, where
        stored and trusted, is the base of the map log's row
        (:mod:`~xarray_vhdf5._versions.maplog`).
    small : smallmaps.Batch, optional
        The commit's rows of the file's map log
        (:mod:`~xarray_vhdf5._versions.smallmaps`): a dataset of fewer than
        :data:`MIN_CHUNKS` chunks is queued there instead.

    Returns
    -------
    bool
        Whether a map was stored (not for fewer than :data:`MIN_CHUNKS`
        chunks, nor variable-length data).
    """
    if raw.dtype.hasobject:
        return False
    starts = np.where(slab_indices != 0, slab_offsets.astype(np.int64), -1)
    numbers = chunk_numbers(starts, chunks[0])
    if slab_indices.size < MIN_CHUNKS:
        if small is not None:
            small.add(path, table_owner(raw), tuple(shape), numbers)
        return False
    bk = bookkeeping.require_group(f)
    name = _maps_path(version, path)
    mapped = _new_map(bk, name, numbers)
    timestamp = _timestamp(f, version)
    write_attr(mapped, "shape", np.asarray(shape, np.int64))
    write_attr(mapped, "vds", np.int64(object_address(vds_id)))
    write_attr(mapped, "raw", np.int64(object_address(raw.id)))
    write_attr(mapped, "timestamp", timestamp)
    write_attr(mapped, "format", np.int64(MAP_FORMAT))
    owner = table_owner(raw)
    _extend_addresses(bk, path, raw, chunks[0], starts, committed_before, owner)
    base = None
    if base_version is not None:
        base = (base_version, lambda: _numbers(MapReader(f, path, raw, chunks, bk), base_version))
    maplog.append(bk, path, raw, owner, version, _micros(timestamp), tuple(shape), numbers, base)
    return True


def _new_map(bk: h5py.Group, name: str, numbers: np.ndarray) -> h5d.DatasetID:
    """The map ``numbers`` written at ``name`` of the bookkeeping group, replacing one there.

    Low-level calls (h5py's ``in``, ``require_group`` and ``create_dataset``
    resolve the path again at each step): this runs in every commit of a
    dataset of :data:`MIN_CHUNKS` chunks or more.
    """
    if _linked(bk.id, name):  # a version re-created under a deleted one's name
        bookkeeping.discard(bk, name)
    folder = posixpath.dirname(name).encode()
    try:
        parent = h5g.open(bk.id, folder)
    except (KeyError, ValueError):
        parent = h5g.create(bk.id, folder, lcpl=_LCPL)
    return _create_map(h5py.Group(parent), posixpath.basename(name), numbers)


def _linked(loc: h5g.GroupID, path: str) -> bool:
    """Whether a link is at ``path`` (relative, ``/``-separated) from ``loc``, looked up component by component."""
    parts = path.split("/")
    return all(loc.links.exists("/".join(parts[: i + 1]).encode()) for i in range(len(parts)))


def _micros(timestamp: str) -> int:
    return to_micros(parse_timestamp(timestamp))


def timestamp_micros(f: h5py.File, version: str) -> int:
    """Version ``version``'s ``timestamp``, in microseconds since 1970-01-01 UTC (read from its group)."""
    return _micros(_timestamp(f, version))


def _timestamp(f: h5py.File, version: str) -> str:
    return str(read_attr(h5g.open(f.id, f"/{VERSION_DATA}/versions/{version}".encode()), "timestamp", expect="str"))


def _numbers(reader: MapReader, version: str) -> np.ndarray | None:
    """``version``'s stored map as :meth:`MapReader.numbers` checks it, or None."""
    found = reader.numbers(version)
    return None if found is None else found[1]


def table_owner(raw: h5py.Dataset) -> tuple[int, int]:
    """The object addresses of raw_data and of its hash table: what an address table is valid for."""
    return object_address(raw.id), object_address_by_name(raw.id, hash_table_path(raw))


def _extend_addresses(
    bk: h5py.Group,
    path: str,
    raw: h5py.Dataset,
    rows_per_chunk: int,
    starts: np.ndarray,
    committed_before: int,
    owner: tuple[int, int],
) -> None:
    """Resolve the address rows ``starts`` needs that the table lacks (or may hold stale).

    ``owner``: :func:`table_owner` of ``raw``.
    """
    name = _address_path(path)
    try:  # low-level calls: this runs in every commit
        table: h5d.DatasetID | None = h5d.open(bk.id, name.encode())
    except (KeyError, ValueError):
        table = None
    if table is not None and _owner_of(table) != owner:
        table = None
        bookkeeping.discard(bk, name)  # raw_data or its hash table were rewritten: every row may be stale
    needed = int(starts.max()) // rows_per_chunk + 1 if starts.size and starts.max() >= 0 else 0
    length = 0 if table is None else table.shape[0]
    have = min(length, committed_before)
    if needed <= have:
        return
    if table is None:
        parent = bk.require_group(posixpath.dirname(name))
        created = parent.create_dataset(
            posixpath.basename(name), shape=(0, 3), maxshape=(None, 3), dtype=np.uint64, chunks=(_ADDRESS_ROWS, 3)
        )
        table = created.id
        write_attr(table, "raw", np.int64(owner[0]))
        write_attr(table, "table", np.int64(owner[1]))
    rows = np.arange(have, needed, dtype=np.uint64) * np.uint64(rows_per_chunk)
    addr, nbytes, masks = chunk_addresses(raw, rows, rows_per_chunk)
    addr = np.where(nbytes > 0, addr, UNKNOWN)  # never allocated: resolved by the reader
    if length < needed:
        table.set_extent((needed, 3))
    write_rows(table, have, np.stack([a.astype(np.uint64) for a in (addr, nbytes, masks)], axis=1))


def _owner_of(table: h5py.Dataset | h5d.DatasetID) -> tuple[int, int] | None:
    tid = table.id if isinstance(table, h5py.Dataset) else table
    try:
        return int(read_attr(tid, "raw", expect="int")), int(read_attr(tid, "table", expect="int"))
    except KeyError:
        return None


def carry(f: h5py.File, source_version: str, version: str, path: str, vds_address: Callable[[], int]) -> bool:
    """Store the map of a dataset committed unchanged: the source version's map, for its copy.

    ``vds_address()``: the object address of the copy (the new version's
    virtual dataset, same mappings), asked for when the source has a map. The source's map is checked as a reader
    checks it (:meth:`MapReader.numbers`): one that no longer holds is not
    copied. Returns False (nothing stored) when the source has no map to trust.
    """
    bk, source = _stored_map(f, source_version, path)
    if bk is None or source is None:  # (a stored map implies the group)
        return False
    raw = f.get(f"{VERSION_DATA}/{path}/raw_data")
    if not isinstance(raw, h5py.Dataset) or raw.chunks is None:
        return False
    numbers = _numbers(MapReader(f, path, raw, raw.chunks, bk), source_version)
    if numbers is None:  # the source's map does not hold (its dataset rewritten since): none for the copy
        return False
    mapped = _new_map(bk, _maps_path(version, path), numbers)
    shape = read_attr(source.id, "shape", expect="int")
    write_attr(mapped, "shape", shape)
    write_attr(mapped, "raw", read_attr(source.id, "raw", expect="int"))
    write_attr(mapped, "vds", np.int64(vds_address()))
    timestamp = _timestamp(f, version)
    write_attr(mapped, "timestamp", timestamp)
    write_attr(mapped, "format", np.int64(MAP_FORMAT))
    shape = tuple(int(s) for s in np.atleast_1d(shape))
    base = (source_version, lambda: numbers)
    maplog.append(bk, path, raw, table_owner(raw), version, _micros(timestamp), shape, numbers, base)
    return True


def has_maps(f: h5py.File, version: str) -> bool:
    """Whether any dataset of ``version`` has a stored map (its group of maps exists)."""
    bk = bookkeeping.open_group(f)
    return bk is not None and _linked(bk.id, f"{_MAPS}/{version}")


def _stored_map(f: h5py.File, version: str, path: str) -> tuple[h5py.Group | None, h5py.Dataset | None]:
    """The bookkeeping group and the map of ``version``'s dataset ``path`` (None where absent)."""
    bk = bookkeeping.open_group(f)
    return bk, None if bk is None else open_object(bk, _maps_path(version, path), h5py.Dataset)


def forget(f: h5py.File) -> None:
    """Drop every stored map, address table and map log (:mod:`~xarray_vhdf5._versions.maplog`,
    :mod:`~xarray_vhdf5._versions.smallmaps`).

    Called at the start of this package's mutations that move chunks
    (deletion, ``modify_metadata``: :func:`~xarray_vhdf5._versions.mutation.mutating`
    with ``moves=True``), inside them: journaled with them.
    """
    bk = bookkeeping.open_group(f)
    if bk is None:
        return
    for name in (_MAPS, _ADDRESSES, maplog.LOG, smallmaps.LOG):
        bookkeeping.discard(bk, name)


def load(f: h5py.File, version: str, path: str, defer: frozenset[str] = frozenset()) -> StoredLayout | None:
    """The stored layout of ``version``'s dataset ``path``, or None when there is none to trust.

    The caller checked that the version index is trusted (the module
    docstring); this checks the addresses of the virtual dataset and of
    raw_data, and resolves through libhdf5 the address rows it cannot use.

    Parameters
    ----------
    f : h5py.File
        Open (read-only is enough).
    version, path : str
        The version's name and the dataset's path in it.
    defer : frozenset of str
        Attributes of the virtual dataset left unread in ``attrs``
        (:data:`~xarray_vhdf5._backend.h5attrs.UNREAD`; see
        :func:`~xarray_vhdf5._backend.h5attrs.read_attrs_of`).

    Returns
    -------
    StoredLayout or None
    """
    bk, stored = _stored_map(f, version, path)
    if stored is None:
        return None
    group_path, _, leaf = f"{VERSION_DATA}/versions/{version}/{path}".rpartition("/")
    group = open_object(f, group_path, h5py.Group)
    if group is None:
        return None
    try:
        attrs = read_attrs_of(group.id, leaf.encode(), defer=defer)
    except KeyError:  # no such dataset in the version
        return None
    raw_path, chunks = attrs.get("raw_data"), attrs.get("chunks")
    if not isinstance(raw_path, str) or chunks is None:
        return None
    raw = open_object(f, raw_path, h5py.Dataset)
    if raw is None:
        return None
    chunks = tuple(int(c) for c in np.atleast_1d(chunks))
    found = MapReader(f, path, raw, chunks, bk).numbers(version, stored.id)
    if found is None:
        return None
    shape, numbers = found
    starts = np.where(numbers >= 0, numbers.astype(np.int64) * chunks[0], -1)
    return StoredLayout(shape, chunks, raw, attrs, starts, lambda rows: _addresses(bk, path, raw, chunks[0], rows))


class MapReader:
    """The stored maps of one dataset, read version after version through one handle.

    Parameters
    ----------
    f : h5py.File
        Open (read-only is enough).
    path : str
        The dataset's path in the versions.
    raw : h5py.Dataset
        Its raw_data.
    chunks : tuple of int
        Its chunk shape (points).
    bk : h5py.Group, optional
        The bookkeeping group, when the caller has it open.
    """

    def __init__(
        self, f: h5py.File, path: str, raw: h5py.Dataset, chunks: tuple[int, ...], bk: h5py.Group | None = None
    ):
        self.path, self.raw, self.chunks = path, raw, tuple(int(c) for c in chunks)
        if bk is None:
            bk = bookkeeping.open_group(f)
        self._bk = None if bk is None else bk.id
        self._versions = h5g.open(f.id, f"/{VERSION_DATA}/versions".encode())
        self._raw_address = object_address(raw.id)

    def numbers(self, version: str, stored: h5d.DatasetID | None = None) -> tuple[tuple[int, ...], np.ndarray] | None:
        """``(shape, chunk numbers)`` of ``version``'s dataset from its stored map, if it can be trusted.

        The checks of the module docstring: the map's format, the object
        addresses of the version's virtual dataset and of raw_data, the
        version's ``timestamp``, the grid's shape, and chunk numbers within
        raw_data. ``stored``: the map, when the caller has it open.

        Returns
        -------
        (tuple of int, numpy.ndarray) or None
            The dataset's shape (points) and, per chunk of its grid, the
            number of the raw_data chunk it maps (-1: unmapped), int; None
            without a map to trust.
        """
        if stored is None:
            if self._bk is None:
                return None
            try:
                stored = h5d.open(self._bk, _maps_path(version, self.path).encode())
            except KeyError:
                return None
        try:
            vds_address = object_address_by_name(self._versions, f"{version}/{self.path}".encode())
            if (
                int(read_attr(stored, "format", expect="int")) != MAP_FORMAT
                or vds_address != int(read_attr(stored, "vds", expect="int"))
                or self._raw_address != int(read_attr(stored, "raw", expect="int"))
                or read_attr(stored, "timestamp", expect="str")
                != read_attr(h5g.open(self._versions, version.encode()), "timestamp", expect="str")
            ):
                return None
            shape = tuple(int(n) for n in np.atleast_1d(read_attr(stored, "shape", expect="int")))
        except KeyError:  # an attribute or the dataset missing: not a map this module wrote whole
            return None
        chunks = self.chunks
        if len(shape) != len(chunks) or len(chunks) != self.raw.ndim:
            return None
        grid = chunk_grid_shape(shape, chunks)
        if stored.shape != grid or stored.dtype.kind != "i":
            return None
        numbers = np.empty(grid, stored.dtype)
        if numbers.size:
            read_rows(stored, 0, numbers)
            if int(numbers.max()) * chunks[0] >= self.raw.shape[0]:  # not raw_data's chunks
                return None
        return shape, numbers


class StoredLayouts:
    """The stored maps of a file's versions, for staging a dataset without opening its virtual dataset.

    ``layouts(source_path)`` for the dataset at ``source_path`` (its HDF5
    path, ``/_version_data/versions/<version>/<path>``) is None when no map
    is stored for it (link lookups only), else a function ``read(raw, chunks)``
    (``raw``: the dataset's raw_data, ``chunks``: its chunk shape in points)
    giving ``(shape, starts)``: the dataset's shape (points) and each chunk's
    first raw_data row (int64 of the chunk grid's shape, -1 unmapped), or
    None when the map cannot be trusted (:meth:`MapReader.numbers`). Two
    steps, so that a caller can read the hash table's state between them
    (before the map, as staging's ``CommittedChunks.read`` does).

    Parameters
    ----------
    f : h5py.File
        The versioned file (read-only is enough); the bookkeeping group is
        looked up once, at the first call.
    """

    def __init__(self, f: h5py.File):
        self._f = f
        self._bk: h5py.Group | None = None
        self._maps: h5g.GroupID | None = None  # the group of every version's maps, when there is one
        self._looked_up = False
        self._versions: dict[str, h5g.GroupID | None] = {}  # each version's group of maps, once looked up

    def __call__(self, source_path: str) -> Callable[..., tuple[tuple[int, ...], np.ndarray] | None] | None:
        prefix = f"/{VERSION_DATA}/versions/"
        if not source_path.startswith(prefix):
            return None
        version, _, path = source_path[len(prefix) :].partition("/")
        if not self._looked_up:
            bk = self._bk = bookkeeping.open_group(self._f)
            if bk is not None and bk.id.links.exists(_MAPS.encode()):
                self._maps = h5g.open(bk.id, _MAPS.encode())
            self._looked_up = True
        maps = self._maps
        if not path or maps is None:
            return None
        if version not in self._versions:  # one lookup in the (large) group of every version's maps
            bversion = version.encode()
            self._versions[version] = h5g.open(maps, bversion) if maps.links.exists(bversion) else None
        group = self._versions[version]
        if group is None or not _linked(group, path):
            return None
        stored = h5d.open(group, path.encode())
        f, bk = self._f, self._bk

        def read(raw: h5py.Dataset, chunks: tuple[int, ...]) -> tuple[tuple[int, ...], np.ndarray] | None:
            if raw.dtype.hasobject:
                return None
            found = MapReader(f, path, raw, chunks, bk).numbers(version, stored)
            if found is None:
                return None
            shape, numbers = found
            return shape, np.where(numbers >= 0, numbers.astype(np.int64) * chunks[0], -1)

        return read


def address_lookup(f: h5py.File, path: str, raw: h5py.Dataset):
    """A ``rows -> (offset, size, mask)`` lookup through raw_data's address table, or None without one.

    For :func:`~xarray_vhdf5._backend.manifest_resolve.resolve_manifest` of a dataset that has no
    stored map (fewer than :data:`MIN_CHUNKS` chunks, or committed by another library):
    its mappings are decoded, its chunks' addresses read from the table where it can be
    trusted (:func:`_addresses`), else asked of libhdf5.
    """
    bk = bookkeeping.open_group(f)
    if bk is None or _address_path(path) not in bk or raw.chunks is None:
        return None
    return lambda rows: _addresses(bk, path, raw, raw.chunks[0], rows)


def stored_addresses(f: h5py.File, path: str, raw: h5py.Dataset) -> np.ndarray | None:
    """Every usable row of ``path``'s address table, without asking libhdf5's chunk index; None without one.

    Rows below the hash table's ``largest_index`` (the chunks commits
    finished), of a table written for this raw_data and hash table (their
    object addresses); row ``k`` is raw_data's chunk ``k`` (rows ``k *
    chunks[0]`` on). For a repair that rebuilds a chunk index libhdf5 cannot
    read (:mod:`~xarray_vhdf5._versions.reindex`).

    Returns
    -------
    numpy.ndarray of uint64, shape ``(n, 3)``, or None
        File offset in bytes (:data:`UNKNOWN`: not resolved), stored size in
        bytes and HDF5 filter mask of each chunk.

    Raises
    ------
    KeyError
        raw_data has no hash table beside it, or it has no ``largest_index``.
    """
    bk = bookkeeping.open_group(f)
    table, usable = (None, 0) if bk is None else _usable_table(bk, path, raw)
    if table is None:
        return None
    return read_rows(table, 0, np.empty((usable, 3), np.uint64)) if usable else np.zeros((0, 3), np.uint64)


def _usable_table(bk: h5py.Group, path: str, raw: h5py.Dataset) -> tuple[h5d.DatasetID | None, int]:
    """``path``'s address table (low-level, opened in ``bk``) and its rows usable for ``raw``; ``(None, 0)``
    without a table written for this raw_data and its hash table. Usable: below the hash table's
    ``largest_index`` (the chunks commits finished; rows past them are overwritten by the next)."""
    try:  # low-level calls: this runs in every open of a dataset with a stored map
        table = h5d.open(bk.id, _address_path(path).encode())
    except (KeyError, ValueError):
        return None, 0
    if _owner_of(table) != table_owner(raw):
        return None, 0
    return table, min(int(table.shape[0]), committed_chunks(raw))


def _addresses(bk: h5py.Group, path: str, raw: h5py.Dataset, rows_per_chunk: int, rows: np.ndarray) -> np.ndarray:
    """``(offset, size, mask)`` of the raw_data chunks starting at ``rows`` (sorted): the table's, else libhdf5's."""
    out = np.zeros((rows.size, 3), np.uint64)
    if rows.size == 0:
        return out
    k = rows.astype(np.intp) // rows_per_chunk
    table, usable = _usable_table(bk, path, raw)
    n = int(np.searchsorted(k, usable))  # rows[:n] have a usable row of the table
    if n:
        assert table is not None  # usable > 0
        first, last = int(k[0]), int(k[n - 1])
        if last - first + 1 == n and bool(np.all(np.diff(k[:n]) == 1)):
            read_rows(table, first, out[:n])  # consecutive chunks: the table's rows are the answer
        else:
            block = read_rows(table, first, np.empty((last - first + 1, 3), np.uint64))
            np.take(block, k[:n] - first, axis=0, out=out[:n])
    missing = np.concatenate([np.flatnonzero(out[:n, 0] == UNKNOWN), np.arange(n, rows.size)])
    if missing.size:
        addr, nbytes, masks = chunk_addresses(raw, rows[missing], rows_per_chunk)
        out[missing] = np.stack([addr, nbytes, masks.astype(np.uint64)], axis=1)
    return out
