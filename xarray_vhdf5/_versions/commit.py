"""Committing a staged version: chunk, hash, append unseen chunks, build virtual datasets.

A commit (``docs/design.md``, "Layers" and "A commit"):

1. creates the version group (``committed=False``) and its subgroups and attrs;
2. for each dataset: if it is unchanged from the previous version, copies the
   previous virtual dataset's mapping (nothing read, nothing written); if it is
   held in a ``StagedChangesArray`` (an edited or sparse dataset), takes the
   chunks its changes plan lists, and maps the others to the raw_data rows they
   already have; a dataset created from data is split into all its chunks.
   Chunks entirely of the fill value are skipped, the others hashed, and only
   digests not yet in the hash table appended to raw_data; then the virtual
   dataset is built;
3. marks the group ``committed=True`` (its ``timestamp``, the time the commit
   began unless given, was written with the group) and, last, moves
   ``current_version``. If anything fails, the half-made group is deleted and
   ``current_version`` is left as it was.
"""

from __future__ import annotations

import datetime as _dt
import posixpath
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeGuard

import h5py
import numpy as np

from .._backend.chunkmap_cache import chunk_map_arrays
from .._backend.chunks import iter_chunks
from .._backend.h5attrs import read_attr, write_attr
from .._backend.h5objects import create_ordered_group, object_address, object_address_by_name
from .._backend.hashing import is_vlen_string_dtype
from .._backend.hashtable import HashTable, table_extends, table_state
from .._backend.layout import VERSION_DATA, VERSIONS
from .._backend.raw_data import ChunkWriter, Filters, WriteStats, create_raw_data, is_fill_chunk
from .._backend.virtual import (
    carry_virtual_dataset,
    copy_virtual_dataset,
    create_virtual_dataset_id,
)
from .._wrappers.chunked import (
    ChunkedStagedDataset,
    InMemoryDataset,
    is_over,
    split_unchanged,
)
from .._wrappers.create import CHUNKS_REQUIRED
from .._wrappers.dataset import InMemoryArrayDataset, StagedDatasetBase
from .._wrappers.group import InMemoryGroup, UnopenedDataset
from ..errors import IncompatibleDataError, StaleVersionError, UnsupportedError
from . import chunkmaps, rootview, smallmaps
from .caches import CommitCaches
from .index import to_micros
from .logrecord import record_commit
from .timestamps import format_timestamp, now_utc, parse_timestamp

__all__ = ["CommitCaches", "CommitReport", "commit_version"]


@dataclass
class CommitReport:
    """What one commit wrote: per dataset path, chunk counts and new bytes."""

    version: str
    datasets: dict[str, WriteStats] = field(default_factory=dict)
    #: The version's timestamp (UTC).
    timestamp: _dt.datetime | None = None
    #: The object address of the version's group (-1: not known), for the version index.
    address: int = -1

    @property
    def new_chunks(self) -> int:
        return sum(s.new_chunks for s in self.datasets.values())

    @property
    def new_bytes(self) -> int:
        """Uncompressed bytes of the chunks appended to raw_data."""
        return sum(s.new_bytes for s in self.datasets.values())

    @property
    def changed(self) -> list[str]:
        """Datasets whose virtual dataset was rebuilt (written to, created or resized)."""
        return [name for name, s in self.datasets.items() if s.chunk_rows or s.fill_chunks or s.new_chunks]


def commit_version(
    f: h5py.File,
    versions: h5py.Group,
    name: str,
    prev_version: str,
    root: InMemoryGroup,
    *,
    make_current: bool = True,
    timestamp: _dt.datetime | None = None,
    caches: CommitCaches | None = None,
    finish: Callable[[h5py.Group], object] | None = None,
    foreign: bool = True,
) -> CommitReport:
    """Write the staged tree ``root`` as version ``name`` on top of ``prev_version``.

    ``caches`` (optional) carries hash tables and chunk maps from the
    previous commit through the same file handle, and receives this one's.
    ``finish`` (optional) is called with the new version's group once its
    datasets are written and before it is marked committed: what it writes
    (the xarray layer's netCDF-4 dimension scales, which reference the
    version's own datasets) is part of the commit, whole or absent with it.
    ``foreign`` (default True): another library may have committed since
    this package last wrote the file, so netCDF attachments it left are
    looked for and repaired (:func:`~xarray_vhdf5._versions.rootview.after_commit`).

    Raises
    ------
    IncompatibleDataError
        A dataset's dtype, chunks, fill value or filters differ from those fixed
        by its first version. Nothing is committed then.
    UnsupportedError
        A new n-d dataset assigned as an array (``group[name] = array``) has no
        chunks: "chunks must be specified for multi-dimensional datasets", as
        versioned-hdf5 2.6 raises (a ``NotImplementedError``). Nothing is
        committed then.
    StaleVersionError
        Another handle rewrote a staged dataset's raw_data or the previous
        version's datasets (deleting versions, ``modify_metadata``) while the
        version was staged. Nothing is committed then.
    """
    caches = caches if caches is not None else CommitCaches()
    subgroups, datasets = root.members_for_commit()
    # Check every dataset against the metadata fixed by its first version before
    # writing anything, so an incompatible or stale one leaves the file untouched (no
    # version group, no chunks appended for the datasets before it).
    # Per dataset: its path's raw_data (None: the first version creates it) and hash
    # table, found and checked here, written through by _commit_dataset.
    targets: dict[str, tuple[h5py.Dataset | None, HashTable | None]] = {}
    for path, ds in datasets.items():
        if isinstance(ds, UnopenedDataset):  # copied as it is: still the object staged?
            ds.check()
            continue
        if isinstance(ds, InMemoryDataset):
            why = ds.rewritten()
            if why is not None:
                raise StaleVersionError(
                    f"{path!r}: {why} while this version was staged (by another handle: deleting "
                    "versions or modify_metadata); stage the version again"
                )
        if not _is_carried(ds, path):
            raw = _existing_raw_data(f, path, ds)
            if raw is not None:
                _check_compatible(path, raw, ds, ds.dtype)
            elif getattr(ds, "chunks_required", False):
                raise UnsupportedError(
                    f"{CHUNKS_REQUIRED}: {path!r} (shape {ds.shape}) was assigned as an array "
                    "(group[name] = array) with no chunks; create it with "
                    "create_dataset(name, data=..., chunks=...) instead"
                )
            table = _check_base_unchanged(path, ds, raw, caches) if isinstance(ds, InMemoryDataset) else None
            targets[path] = (raw, table)
    # track_order: datasets and groups list in creation order (netCDF's variable order).
    group = create_ordered_group(versions, name)
    report = CommitReport(name)
    try:
        # The format's attributes go through backend.h5attrs (the compiled attribute
        # kernel): the datatypes of ``group.attrs[...] = ...``, a tenth of the cost.
        # The timestamp is final from the start (the time the commit began, or the
        # caller's); ``committed`` turns True last (``docs/format.md``).
        report.timestamp = timestamp if timestamp is not None else now_utc()
        stamp = format_timestamp(report.timestamp)
        gid = group.id
        report.address = object_address(gid)
        write_attr(gid, "prev_version", prev_version)
        write_attr(gid, "committed", False)
        write_attr(gid, "timestamp", stamp)
        root.attrs.write_to(group)
        for sub in subgroups:
            sub.attrs.write_to(create_ordered_group(group, sub.name))
        maps = _CommitMaps(f, smallmaps.Batch(name, to_micros(parse_timestamp(stamp))))
        for path, ds in datasets.items():
            report.datasets[path] = _commit_dataset(f, group, path, ds, caches, maps, *targets.get(path, (None, None)))
        maps.small.write(f)  # the file's map log: one append for every small dataset
        if finish is not None:
            finish(group)
        write_attr(gid, "committed", True)
        if make_current:
            write_attr(versions.id, "current_version", name)
        rootview.after_commit(f, versions, name, prev_version, make_current, repair=foreign)
    except BaseException:
        caches.clear()
        del versions[name]
        raise
    caches.open_datasets.keep_made(caches.chunk_map_cache.commit(stamp))
    record_commit(f, group, name, prev_version, stamp, datasets, report.datasets, caches)  # for `vhdf5 log`
    return report


def _commit_dataset(
    f: h5py.File,
    version_group: h5py.Group,
    path: str,
    ds: StagedDatasetBase | UnopenedDataset,
    caches: CommitCaches,
    maps: _CommitMaps,
    raw: h5py.Dataset | None,
    table: HashTable | None,
) -> WriteStats:
    """Write one dataset of the version: copied as it is, or its changed chunks and a new virtual dataset.

    ``raw`` and ``table``: the path's raw_data (None: none yet) and hash table
    (None: not opened yet), as :func:`commit_version` found and checked them.
    ``maps``: the commit's chunk maps of datasets carried unchanged, and of
    small ones (:class:`_CommitMaps`).
    """
    parent_path, last = posixpath.split(path)
    parent = version_group[parent_path] if parent_path else version_group
    version = posixpath.basename(version_group.name)
    if isinstance(ds, UnopenedDataset):  # never accessed: mappings and attributes copied inside libhdf5
        carry_virtual_dataset(ds.gid, ds.bname, parent, last, ds.num_attrs)  # checked: the object staged
        caches.chunk_map_cache.carry(ds.source_path, ds.address, parent, last)
        maps.carry(ds.source_path, version, path, parent, last)
        return WriteStats()
    if _is_carried(ds, path):
        if ds.attrs.changed:
            _drop_object_references(ds.attrs)
            ds.attrs.write_to(copy_virtual_dataset(ds.source, parent, last, None))
        else:  # mappings and attributes copied inside libhdf5
            carry_virtual_dataset(ds.source_id, b".", parent, last)
        caches.chunk_map_cache.carry(ds.source_path, object_address(ds.source_id), parent, last)  # the same mappings
        maps.carry(ds.source_path, version, path, parent, last)
        return WriteStats()
    _drop_object_references(ds.attrs)
    if isinstance(ds, ChunkedStagedDataset):
        writer, shape = _commit_staged_array(
            _writer_for(f, path, ds, ds.staged_array.dtype, caches, raw, table), ds, ds.staged_array
        )
    else:
        assert isinstance(ds, InMemoryArrayDataset)  # the one staged kind that is not chunked
        data = ds._loaded()
        if hasattr(data, "iter_hashed_chunks"):
            writer, shape = _commit_streamed(_writer_for(f, path, ds, np.dtype(data.dtype), caches, raw, table), data)
        else:
            data = _storable(data)
            writer, shape = _commit_array(_writer_for(f, path, ds, data.dtype, caches, raw, table), data)
    writer.flush()
    chunk_rows = sorted(writer.stats.chunk_rows)
    fill = {} if writer.fillvalue is None else {"fillvalue": writer.fillvalue}
    vds = create_virtual_dataset_id(parent.id, last, writer.raw_data, shape, writer.chunks, chunk_rows, **fill)
    ds.attrs.write_to(vds)
    arrays = chunk_map_arrays(shape, writer.chunks, chunk_rows)
    caches.chunk_map_cache.stage(vds, writer.raw_data, shape, writer.chunks, arrays, writer.hash_table.state)
    chunkmaps.record(
        f,
        version,
        path,
        vds,
        writer.raw_data,
        shape,
        writer.chunks,
        *arrays,
        committed_before=len(writer.hash_table) - writer.stats.new_chunks,
        base_version=_source_version(getattr(ds, "source_path", None), path),
        small=maps.small,
    )
    return writer.stats


def _source_version(source_path: bytes | str | None, path: str) -> str | None:
    """The version whose dataset ``path`` a staged dataset was opened from (``source_path``), or None."""
    if source_path is None:
        return None
    source = source_path.decode() if isinstance(source_path, bytes) else str(source_path)
    prefix = f"/{VERSION_DATA}/{VERSIONS}/"
    if source.startswith(prefix) and source[len(prefix) :].partition("/")[2] == path:
        return source[len(prefix) :].partition("/")[0]
    return None


class _CommitMaps:
    """One commit's chunk maps of datasets carried unchanged, and its rows of the file's map log.

    ``small``: the rows of the datasets without a stored map
    (:mod:`~xarray_vhdf5._versions.smallmaps`), written once every dataset is.
    Whether a source version has stored maps at all is looked up once a
    version: most carried datasets of a commit share their source.
    """

    def __init__(self, f: h5py.File, small: smallmaps.Batch):
        self.f, self.small = f, small
        self._stored: dict[str, bool] = {}  # source version -> whether it has stored maps

    def carry(self, source_path, version: str, path: str, parent: h5py.Group, last: str) -> None:
        """The map of dataset ``path`` copied unchanged from ``source_path`` (its version's), where it has
        one: its stored map, else its row of the file's map log."""
        source_version = _source_version(source_path, path)
        if source_version is None:
            return
        stored = self._stored.get(source_version)
        if stored is None:
            stored = self._stored[source_version] = chunkmaps.has_maps(self.f, source_version)
        if stored and chunkmaps.carry(
            self.f, source_version, version, path, lambda: object_address_by_name(parent.id, last.encode())
        ):
            return
        self.small.carry(path, source_version, lambda v: chunkmaps.timestamp_micros(self.f, v))


def _commit_array(writer: ChunkWriter, data: np.ndarray) -> tuple[ChunkWriter, tuple]:
    """Queue every chunk of a numpy array (a dataset created from data, as raw_data stores it)."""
    # New chunks are appended in versioned-hdf5's order; the mappings are made in C order.
    for index, region in iter_chunks(data.shape, writer.chunks, axis0_fastest=True):
        writer.add(index, data[region])
    return writer, data.shape


def _commit_staged_array(writer: ChunkWriter, ds, array) -> tuple[ChunkWriter, tuple]:
    """Queue the chunks of a ``StagedChangesArray``'s changes plan; map the others as they are.

    The other chunks lie on its base slab, this path's raw_data, and keep
    their rows. When that cannot hold (the dataset was moved to another path,
    or its chunks differ from those fixed by the path's raw_data), every chunk
    is read from the array and hashed instead.
    """
    if tuple(array.chunk_size) != writer.chunks or not is_over(array, writer.raw_data):
        for index, region in iter_chunks(array.shape, writer.chunks, axis0_fastest=True):
            writer.add(index, _storable(array[region]))
        return writer, tuple(array.shape)
    base_shape = ds.source_shape if isinstance(ds, InMemoryDataset) else array.shape
    plan = array._changes_plan()
    reused, retrimmed = split_unchanged(array, plan, base_shape)
    full = plan.changed_slab_indices == 0
    if full.any() and is_fill_chunk(np.asarray(array.fill_value).reshape(1), writer.fillvalue):
        # Chunks on the full slab are all raw_data's fill value: never stored nor mapped
        # (the virtual dataset's fill value supplies them), so not materialised either:
        # a resize to 2**31 points in chunks of 1000 adds 2 million of them.
        writer.stats.fill_chunks += int(np.count_nonzero(full))
        plan = plan.only(~full)
    cs = array.chunk_size
    to_store = [(c.chunk, data) for c, data in array.changed_chunks(plan)]
    for index in retrimmed:
        region = tuple(slice(i * c, min((i + 1) * c, n)) for i, c, n in zip(index, cs, array.shape))
        to_store.append((index, array[region]))
    # New chunks are appended in versioned-hdf5's order (axis 0 fastest).
    to_store.sort(key=lambda item: item[0][::-1])
    for index, data in to_store:
        writer.add(index, _storable(data))
    writer.stats.reused_chunks += len(reused)
    writer.stats.chunk_rows.extend(reused)
    return writer, tuple(array.shape)


def _check_base_unchanged(
    path: str, ds: InMemoryDataset, raw: h5py.Dataset | None, caches: CommitCaches
) -> HashTable | None:
    """Refuse a staged dataset whose raw_data was rewritten after its chunk map was taken.

    Its unchanged chunks would be mapped, and its partly written ones were
    read, at rows that raw_data no longer holds (another writer deleted
    versions, which compacts raw_data, or changed its metadata, while this
    version was staged). Every such rewrite rebuilds the hash table, whose
    state is compared; a table that only grew (another commit meanwhile)
    keeps the rows (:func:`~xarray_vhdf5._backend.hashtable.table_extends`).
    Called for every dataset before anything is written, so a stale dataset
    leaves no rows appended for the ones before it.

    Parameters
    ----------
    path : str
        The dataset's path in the version (for the message).
    ds : InMemoryDataset
        The staged dataset; its ``base_table_state`` is the state its chunk
        map was taken under (None: nothing to check).
    raw : h5py.Dataset or None
        The raw_data the dataset is committed into (``_existing_raw_data``).
    caches : CommitCaches
        The handle's caches: held hash tables and datasets.

    Returns
    -------
    HashTable or None
        ``raw``'s hash table, opened (and cached) here, when ``raw`` is the
        raw_data the dataset was staged over (the usual case: the commit then
        writes through it without reading its state again); else None.

    Raises
    ------
    StaleVersionError
        The hash table changed since the chunk map was taken.
    """
    expected = ds.base_table_state
    table = None
    if raw is not None and raw is ds.raw_data:
        table = caches.hash_tables.open(*caches.open_datasets.hash_table(raw))
        if expected is None:
            return table
        table_id, current = table.dataset.id, table.state
    elif expected is None:
        return None
    else:  # moved: the rows were read from the source path's raw_data
        table_id = caches.open_datasets.hash_table_id(ds.raw_data)
        current = table_state(table_id)
    if current != expected and not table_extends(table_id, expected, current):
        raise StaleVersionError(
            f"{path!r}: its raw_data was rewritten (its hash table changed: {expected[0]} rows before, "
            f"{current[0]} now) while this version was staged, e.g. by deleting versions or "
            "modify_metadata through another handle; stage the version again"
        )
    return table


def _storable(chunk: np.ndarray) -> np.ndarray:
    """A chunk as raw_data stores it (StringDType as object strings)."""
    return chunk.astype(object) if chunk.dtype.kind == "T" else chunk


def _holds_object_references(value) -> bool:
    """True for an attribute value holding HDF5 object or region references."""
    if isinstance(value, (h5py.Reference, h5py.RegionReference)):
        return True
    if not isinstance(value, np.ndarray):
        return False
    if value.dtype.names:
        return any(_holds_object_references(value[field]) for field in value.dtype.names)
    return value.dtype.kind == "O" and any(_holds_object_references(v) for v in value.flat)


def _drop_object_references(attrs) -> None:
    """Drop attributes holding object references (e.g. dimension scales' ``DIMENSION_LIST``).

    A reference read from the previous version addresses an object of that
    version's group: written on the new version it would point into the old
    one. The xarray writer rebuilds netCDF-4 dimension scales after its commits
    (``xr._dimscales.attach_dimension_scales``).
    """
    for key in [k for k in attrs if k in ("DIMENSION_LIST", "REFERENCE_LIST") or _holds_object_references(attrs[k])]:
        del attrs[key]


# -- lazy data (dask), streamed chunk by chunk ---------------------------------
#
# A staged dataset may hold, instead of a numpy array, a *chunk source*: an object
# with ``shape``, ``dtype`` and ``iter_hashed_chunks(chunks, fillvalue)`` yielding
# ``(chunk_index, chunk, digest)`` for every chunk of the grid ``chunks`` (in points),
# once each, in any order: ``chunk`` the edge-trimmed points (None when every point is
# the fill value, which is then not stored), ``digest`` its ``chunk_hash`` (None: hash
# it here). The xarray writer stages dask arrays so (``xr._streaming.DaskChunkSource``),
# computing and hashing chunks on dask workers; only this process writes raw_data.


def _commit_streamed(writer: ChunkWriter, source) -> tuple[ChunkWriter, tuple]:
    """Queue a chunk source: at most a batch of chunks and the write queue in memory."""
    # Smaller than the default queue: the write slab is a second copy of it.
    writer.max_queued_bytes = 16 * 1024 * 1024
    for index, chunk, digest in source.iter_hashed_chunks(writer.chunks, writer.fillvalue):
        if chunk is None:  # all fill value (decided where the chunk was cut)
            writer.stats.fill_chunks += 1
        else:
            writer.add(index, chunk, digest)
    return writer, tuple(source.shape)


def _is_carried(ds: StagedDatasetBase, path: str) -> TypeGuard[InMemoryDataset]:
    """True for a dataset of the previous version left untouched at the same path."""
    return isinstance(ds, InMemoryDataset) and not ds.has_changes and ds.origin_name == path


def _existing_raw_data(f: h5py.File, path: str, ds: StagedDatasetBase | None = None) -> h5py.Dataset | None:
    """The raw_data of ``path`` if an earlier version (even a deleted one) created it.

    A dataset of the previous version still at its path already holds it open
    (no lookup then).
    """
    data_path = f"{VERSION_DATA}/{path}"
    if isinstance(ds, InMemoryDataset) and ds.origin_name == path and ds.raw_data.name == f"/{data_path}/raw_data":
        return ds.raw_data
    if data_path in f and "raw_data" in f[data_path]:
        return f[data_path]["raw_data"]
    return None


def _writer_for(
    f: h5py.File,
    path: str,
    ds: StagedDatasetBase,
    dtype: np.dtype,
    caches: CommitCaches,
    raw: h5py.Dataset | None,
    table: HashTable | None = None,
) -> ChunkWriter:
    """A :class:`ChunkWriter` into ``raw``, the raw_data of ``path``; created (``raw`` None) on its first version.

    ``raw`` was found (:func:`_existing_raw_data`) and checked against ``ds``
    by :func:`commit_version` before anything was written; ``table``, its
    hash table if that check opened it.
    """
    data_path = f"{VERSION_DATA}/{path}"
    if raw is not None:
        if table is None:
            table = caches.hash_tables.open(*caches.open_datasets.hash_table(raw))
        if _over_own_raw_data(path, ds, raw):  # its chunks and fill value are raw_data's
            return ChunkWriter(raw, table, chunks=ds.chunks, fillvalue=ds.storage_fill, best_fit=True)
        return ChunkWriter(raw, table, best_fit=True)
    grp = f.require_group(data_path)
    raw = create_raw_data(grp, dtype, ds.chunks, ds.storage_fill, ds.filters)
    return ChunkWriter(raw, caches.hash_tables.put(HashTable.create(grp)))


def _over_own_raw_data(path: str, ds: StagedDatasetBase, raw: h5py.Dataset) -> bool:
    """True for a dataset of the previous version, at its path, whose metadata was read from ``raw``."""
    return isinstance(ds, InMemoryDataset) and ds.origin_name == path and ds.raw_data is raw


def _check_compatible(path: str, raw: h5py.Dataset, ds: StagedDatasetBase, dtype: np.dtype) -> None:
    if _over_own_raw_data(path, ds, raw):
        return  # chunks, dtype and fill value come from raw itself (a replaced staged_array is checked when set)
    raw_chunks = tuple(int(c) for c in read_attr(raw.id, "chunks", expect="int"))
    if len(ds.shape) != len(raw_chunks):
        raise IncompatibleDataError(
            f"dataset {path!r}: {len(ds.shape)} dimensions (shape {ds.shape}), but its raw_data has "
            f"{len(raw_chunks)} (chunks {raw_chunks}) fixed by its first version; a dataset keeps its "
            "number of dimensions across versions (store the new data under another name)"
        )
    if getattr(ds, "chunks_given", True) and ds.chunks != raw_chunks:
        raise IncompatibleDataError(
            f"dataset {path!r}: chunks {ds.chunks} differ from {raw_chunks} fixed by its first "
            "version (use modify_metadata to change them)"
        )
    ds.chunks = raw_chunks
    both_strings = is_vlen_string_dtype(dtype) and is_vlen_string_dtype(raw.dtype)
    if dtype != raw.dtype and not both_strings:
        raise IncompatibleDataError(
            f"dataset {path!r}: dtype {dtype} differs from {raw.dtype} fixed by its first version"
        )
    if not getattr(ds, "fillvalue_given", True) and not both_strings:
        ds.storage_fill = raw.fillvalue
    if not both_strings and ds.storage_fill is not None:
        same = np.asarray(ds.storage_fill, raw.dtype).tobytes() == np.asarray(raw.fillvalue, raw.dtype).tobytes()
        if not same:
            raise IncompatibleDataError(
                f"dataset {path!r}: fill value {ds.storage_fill!r} differs from {raw.fillvalue!r} "
                "fixed by its first version"
            )
    if (
        isinstance(ds, InMemoryArrayDataset)
        and getattr(ds, "filters_given", True)
        and ds.filters != Filters()
        and ds.filters != Filters.of(raw)
    ):
        raise IncompatibleDataError(
            f"dataset {path!r}: filters {ds.filters} differ from {Filters.of(raw)} fixed by its "
            "first version (use modify_metadata to change them)"
        )
