"""Per-version log records: what ``vhdf5 log`` needs of a version, written by its commit.

Without them the log decodes every version's virtual-dataset mappings
(O(chunks) a version, O(N**2) over a history of appends). A commit appends one
record to ``/__vhdf5__/log`` (this package's bookkeeping group, which
versioned-hdf5 2.6 never reads: :mod:`~xarray_vhdf5._versions.bookkeeping`):

- ``log``: uint8, the records one after the other; its attribute ``used``
  (int64) counts the bytes of whole records, written last (a torn append is
  ignored). A record is one JSON object (below), stored either as its UTF-8
  text ended by a newline (first byte ``{``; what earlier commits wrote), or
  compressed (:data:`PACKED`, then the length of what follows as a
  little-endian uint32, then the JSON text compressed by raw deflate with
  :data:`ZDICT` as its preset dictionary, RFC 1951 and zlib's
  ``deflateSetDictionary``). Commits write compressed records, about 280
  bytes where the text takes 600 (``docs/benchmarks.md``, "History size").

A record holds:

``v``, ``p``, ``t``
    The version's name, its ``prev_version`` when committed, its timestamp
    (microseconds since 1970 UTC). A record is used only when all three still
    describe the version group (:func:`load`; else the version is decoded).
``d``
    Every dataset of the version, by path, as a :class:`Fingerprint` (list)
    for a dataset the commit wrote (new chunks, a new mapping, or new
    attributes), else ``{"src": path}``: carried unchanged from that path of
    the parent (same mapping and attributes).
``o``
    The object address of every dataset the record describes by value (not
    carried): ``modify_metadata`` and deletions that move chunks replace the
    virtual datasets, whose record then no longer holds, even where the
    chunks' digests stay the same (new chunk shape, same data).
``h``
    Per raw_data (absolute path) a rebuilt dataset maps:
    ``[rows before, rows after, hex digest of the last row after]`` of its
    hash table. Rows ``[before, after)`` are the chunks this commit stored;
    the digest proves later that no row below ``after`` moved since
    (:func:`~xarray_vhdf5._backend.hashtable.table_extends`).

How the log checks and uses records: :mod:`~xarray_vhdf5._versions.history`.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import posixpath
import weakref
import zlib
from typing import Any, NamedTuple

import h5py
import numpy as np
from h5py import h5d

from .._backend.chunks import chunk_grid_shape
from .._backend.h5attrs import read_attr, write_attr
from .._backend.h5objects import object_address_by_name
from .._backend.hashtable import BOOKKEEPING_FILTER
from .._backend.rows import read_rows, write_rows
from . import bookkeeping
from .index import to_micros
from .timestamps import parse_timestamp

__all__ = [
    "Fingerprint",
    "attrs_digest",
    "fingerprint_of",
    "load",
    "mapping_digest",
    "pack_record",
    "record_commit",
    "unpack_records",
]

#: Name of the records dataset inside the bookkeeping group.
LOG_NAME = "log"
#: Version of the record layout (key ``f``); records of another are ignored.
RECORD_FORMAT = 2
#: First byte of a compressed record (a JSON record's is ``{``).
PACKED = 0
#: The preset dictionary of compressed records: text every record repeats (deflate looks
#: back into it). Part of the format: a record compressed with it reads only with it.
ZDICT = (
    b"\"[('', '<i4')]|\",\"[('', '|u1')]|\",\"[('', '|S1')]|\",\"[('', '|O')]|utf-8\","
    b"\"[('', '<f8')]|\",\"[('', '<i8')]|\",\"[('', '<f4')]|\","
    b'{"src":"","a":"","l":true},{"f":2,"v":"","p":"","t":1,"d":{"":[[1],"[(\'\', \'<f4\')]|",[1],'
    b'"/_version_data/","/raw_data","",true]},"h":{"/_version_data/":[1,1,""]},"o":{"":1}}'
)


class Fingerprint(NamedTuple):
    """What the log compares of a version's dataset (:class:`~xarray_vhdf5._versions.states.DatasetState`).

    ``attrs`` is a digest: equal digests mean equal attributes; unequal ones
    are compared value by value (``1`` equals ``1.0`` there).
    """

    shape: tuple[int, ...]
    dtype: str  # str(dtype.descr): equal for equal dtypes
    chunks: tuple[int, ...]
    raw_path: str
    mapping: str  # hex digest (:func:`mapping_digest`)
    attrs: str  # hex digest (:func:`attrs_digest`)
    listed: bool  # False: left out of the log (a netCDF-4 dimension scale only, or not a versioned dataset)

    def to_json(self) -> list:
        return [list(self.shape), self.dtype, list(self.chunks), self.raw_path, self.mapping, self.attrs, self.listed]

    @classmethod
    def from_json(cls, value: list) -> Fingerprint:
        shape, dtype, chunks, raw_path, mapping, attrs, listed = value
        return cls(
            tuple(int(n) for n in shape),
            str(dtype),
            tuple(int(c) for c in chunks),
            str(raw_path),
            str(mapping),
            str(attrs),
            bool(listed),
        )


def dtype_key(dtype: np.dtype) -> str:
    """A string equal for equal dtypes (fields and h5py's string kind included)."""
    vlen = h5py.check_string_dtype(dtype)
    return f"{dtype.descr}|{vlen.encoding if vlen is not None else ''}"


def mapping_digest(flat: np.ndarray, offsets: np.ndarray) -> str:
    """Digest of a chunk mapping: the mapped chunks (C-order positions, ascending) and their first raw_data rows.

    Parameters
    ----------
    flat : numpy.ndarray of integers, shape (n,)
        C-order position of each mapped chunk in the chunk grid, ascending.
    offsets : numpy.ndarray of integers, shape (n,)
        Its first raw_data row (points along axis 0), in the same order.
    """
    digest = hashlib.blake2b(digest_size=16)
    digest.update(np.ascontiguousarray(flat, dtype="<u8").tobytes())
    digest.update(b"|")
    digest.update(np.ascontiguousarray(offsets, dtype="<u8").tobytes())
    return digest.hexdigest()


def _attr_bytes(value: Any) -> bytes:
    arr = np.asarray(value)
    if arr.dtype.kind == "O" or arr.dtype.names:
        return repr((arr.shape, arr.tolist())).encode()
    return f"{arr.dtype.str}{arr.shape}".encode() + arr.tobytes()


def attrs_digest(attrs: dict[str, Any]) -> str:
    """Digest of attribute values by name (equal bytes, equal digest; see :class:`Fingerprint`)."""
    digest = hashlib.blake2b(digest_size=16)
    for key in sorted(attrs):
        digest.update(key.encode() + b"\0" + _attr_bytes(attrs[key]) + b"\0")
    return digest.hexdigest()


def fingerprint_of(
    dset: h5py.Dataset,
    flat: np.ndarray,
    offsets: np.ndarray,
    listed: bool,
    chunks: tuple[int, ...] | None = None,
    raw_path: str | None = None,
) -> Fingerprint:
    """The fingerprint of a committed version's dataset whose mapping is given.

    ``chunks`` and ``raw_path``: its ``chunks`` and ``raw_data`` attributes, when
    the caller read them already (else read here).
    """
    from .states import compared_attrs  # the attributes the log compares

    if chunks is None:
        chunks = tuple(int(c) for c in read_attr(dset.id, "chunks", expect="int"))
    if raw_path is None:
        raw_path = str(read_attr(dset.id, "raw_data", expect="str"))
    return Fingerprint(
        tuple(dset.id.shape),  # the low-level id's: h5py's Dataset properties add a lock and a cache
        dtype_key(dset.id.dtype),
        chunks,
        raw_path,
        mapping_digest(flat, offsets),
        attrs_digest(compared_attrs(dset)),
        listed,
    )


# -- written by a commit ------------------------------------------------------------------


def _listed(dset: h5py.Dataset, virtual: bool = False) -> bool:
    """Whether the log lists the dataset (as states.version_states does); ``virtual``: known to be one."""
    from .._backend.names import is_netcdf_dimension_only

    return "raw_data" in dset.attrs and (virtual or dset.is_virtual) and not is_netcdf_dimension_only(dset)


def _source_in(prefix: str, staged) -> str | None:
    """The path in the parent a carried dataset was copied from, or None if it is not in the parent."""
    source = getattr(staged, "source_path", None)
    if isinstance(source, bytes):
        source = source.decode()
    if not isinstance(source, str) or not source.startswith(prefix):
        return None
    return source[len(prefix) :]


def _made(group: h5py.Group, path: str, caches) -> tuple[h5py.Dataset, bool, int]:
    """The version's dataset at ``path``, whether the commit made it (a virtual dataset, held open), its address.

    The held id is used when there is one: opening a virtual dataset decodes every mapping.
    """
    bpath = f"{group.name}/{path}".encode()
    addr = object_address_by_name(group.id, bpath)
    vid = caches.open_datasets.made(bpath, addr)
    return (h5py.Dataset(vid), True, addr) if vid is not None else (group[path], False, addr)


def _mapping(shape: tuple[int, ...], chunks: tuple[int, ...], chunk_rows) -> tuple[np.ndarray, np.ndarray]:
    """``(flat, offsets)`` of :func:`mapping_digest` from a commit's ``chunk_rows``.

    ``chunk_rows``: ``(chunk index, start, stop)`` of every chunk the dataset
    maps (``WriteStats.chunk_rows``), in any order; linear in the chunks.
    """
    n = len(chunk_rows)
    if not n:
        return np.zeros(0, np.uint64), np.zeros(0, np.uint64)
    grid = chunk_grid_shape([int(m) for m in shape], chunks)
    index = np.fromiter(
        itertools.chain.from_iterable(r[0] for r in chunk_rows), dtype=np.intp, count=n * len(grid)
    ).reshape(n, len(grid))
    per_axis: list[np.ndarray] = list(index.T)  # typed: numpy's stubs take a bare array for one index
    flat = np.ravel_multi_index(per_axis, grid)
    offsets = np.fromiter((r[1] for r in chunk_rows), dtype=np.uint64, count=n)
    order = np.argsort(flat, kind="stable")
    return flat[order], offsets[order]


def build_record(
    group: h5py.Group,
    name: str,
    prev_version: str,
    timestamp_us: int,
    datasets: dict[str, Any],
    stats: dict[str, Any],
    caches,
) -> dict | None:
    """The record of version ``name`` just written in ``group`` (None when it cannot say).

    Parameters
    ----------
    group : h5py.Group
        The new version's group, its datasets written.
    datasets : dict
        Path -> staged dataset, as the commit wrote them.
    stats : dict
        Path -> :class:`~xarray_vhdf5._backend.raw_data.WriteStats` of the commit
        (empty for a dataset carried from the parent).
    caches : CommitCaches
        The commit's caches: the raw_data and hash tables it wrote through.
    """
    prefix = f"{posixpath.dirname(group.name)}/{prev_version}/"  # h5py's group.parent opens the parent
    entries: dict[str, Any] = {}
    tables: dict[str, list] = {}
    objects: dict[str, int] = {}
    for path, staged in datasets.items():
        st = stats.get(path)
        if st is None:
            return None
        # A dataset of size > 0 the commit rebuilt has chunks either mapped or all fill.
        rebuilt = bool(st.chunk_rows or st.fill_chunks or st.new_chunks) or 0 in tuple(getattr(staged, "shape", ()))
        if not rebuilt:
            source = _source_in(prefix, staged)
            if source is None:
                return None
            changed_attrs = getattr(getattr(staged, "attrs", None), "changed", False)
            entries[path] = {"src": source}
            if changed_attrs:
                from .states import compared_attrs

                dset, _, objects[path] = _made(group, path, caches)

                entries[path]["a"] = attrs_digest(compared_attrs(dset))
                entries[path]["l"] = _listed(dset)
            continue
        dset, virtual, objects[path] = _made(group, path, caches)
        if not _listed(dset, virtual):
            entries[path] = Fingerprint((), "", (), "", "", "", False).to_json()
            continue
        chunks = tuple(int(c) for c in read_attr(dset.id, "chunks", expect="int"))
        raw_path = str(read_attr(dset.id, "raw_data", expect="str"))
        # The commit's own handles (held open, the table's state in memory): nothing opened.
        raw = caches.open_datasets.raw_data(group.id, raw_path, 0)
        flat, offsets = _mapping(dset.id.shape, chunks, st.chunk_rows)
        fp = fingerprint_of(dset, flat, offsets, True, chunks, raw_path)
        entries[path] = fp.to_json()
        if fp.raw_path not in tables:
            n_after, last = caches.hash_tables.open(*caches.open_datasets.hash_table(raw)).state
            tables[fp.raw_path] = [n_after - st.new_chunks, n_after, last.hex()]
        else:  # two datasets over one raw_data: their appended rows add up
            tables[fp.raw_path][0] -= st.new_chunks
    return {
        "f": RECORD_FORMAT,
        "v": name,
        "p": prev_version,
        "t": timestamp_us,
        "d": entries,
        "h": tables,
        "o": objects,
    }


#: File id -> (object address, id) of the records dataset a commit through it appended to: held
#: open, so that the next commit opens nothing (checked to be still the object at its path).
_HELD: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _open_log(f: h5py.File) -> h5d.DatasetID | None:
    """The records dataset (held from the last append through ``f`` if still the one linked), or None."""
    path = bookkeeping.find(f)
    if path is None:
        return None
    bpath = f"{path}/{LOG_NAME}".encode()
    if not f.id.links.exists(bpath):
        return None
    addr = object_address_by_name(f.id, bpath)
    held = _HELD.get(f.id)
    if held is not None and held[0] == addr and held[1].valid:
        return held[1]
    dsid = h5d.open(f.id, bpath)
    _HELD[f.id] = (addr, dsid)
    return dsid


def pack_record(record: dict) -> bytes:
    """A record as the log stores it: :data:`PACKED`, uint32 length, deflate with :data:`ZDICT`."""
    packer = zlib.compressobj(6, zlib.DEFLATED, -15, zdict=ZDICT)
    body = packer.compress(json.dumps(record, separators=(",", ":")).encode()) + packer.flush()
    return bytes([PACKED]) + len(body).to_bytes(4, "little") + body


def unpack_records(blob: bytes) -> list[Any]:
    """The records of a log's bytes, each as JSON decoded (or None where one is unreadable), in order.

    A record that does not decode is skipped when its end can still be found (a
    JSON line, or a compressed record whose length fits); at bytes that are
    neither, reading stops. Nothing here raises on bad bytes.
    """
    out: list[Any] = []
    at, end = 0, len(blob)
    while at < end:
        if blob[at] == PACKED:
            if at + 5 > end:
                break
            n = int.from_bytes(blob[at + 1 : at + 5], "little")
            if at + 5 + n > end:
                break
            body = blob[at + 5 : at + 5 + n]
            at += 5 + n
            try:
                unpacker = zlib.decompressobj(-15, zdict=ZDICT)
                out.append(json.loads(unpacker.decompress(body) + unpacker.flush()))
            except (zlib.error, ValueError):
                out.append(None)
        elif blob[at] == ord("{"):
            stop = blob.find(b"\n", at)
            stop = end if stop < 0 else stop
            try:
                out.append(json.loads(blob[at:stop]))
            except ValueError:
                out.append(None)
            at = stop + 1
        else:
            break
    return out


def append_record(f: h5py.File, record: dict) -> None:
    """Append one record to ``/__vhdf5__/log`` (created on first use), compressed (:func:`pack_record`)."""
    data = np.frombuffer(pack_record(record), dtype=np.uint8)
    dsid = _open_log(f)
    if dsid is not None:
        used = int(np.asarray(read_attr(dsid, "used", expect="int")).reshape(-1)[0])
        capacity = dsid.shape[0]
        if capacity < used + len(data):
            dsid.set_extent((max(used + len(data), 2 * capacity),))
    else:
        grp = bookkeeping.require_group(f)
        ds = grp.create_dataset(
            LOG_NAME,
            shape=(max(len(data), 4096),),
            dtype=np.uint8,
            chunks=(4096,),
            maxshape=(None,),
            **BOOKKEEPING_FILTER,
        )
        dsid, used = ds.id, 0
        _HELD[f.id] = (object_address_by_name(f.id, ds.name.encode()), dsid)
    write_rows(dsid, used, data)
    write_attr(dsid, "used", np.int64(used + len(data)))


def record_commit(
    f: h5py.File,
    group: h5py.Group,
    name: str,
    prev_version: str,
    stamp: str,
    datasets: dict[str, Any],
    stats: dict[str, Any],
    caches,
) -> bool:
    """Write the log record of a commit; True when written.

    Called by the commit once it succeeded (the version marked committed):
    a process that dies before leaves a version without a record, which the
    log decodes. ``stamp``: the ``timestamp`` attribute written on
    the version group; ``datasets``, ``stats`` and ``caches`` as for :func:`build_record`.

    Never fails the commit: a record that cannot be built or written is left
    out, and the log decodes that version instead (HDF5 and value errors are
    swallowed here for that reason).
    """
    try:
        record = build_record(group, name, prev_version, to_micros(parse_timestamp(stamp)), datasets, stats, caches)
        if record is None:
            return False
        append_record(f, record)
    except (OSError, KeyError, ValueError, RuntimeError, TypeError):
        return False
    return True


# -- read by the log ------------------------------------------------------------------------


def load(f: h5py.File) -> dict[str, dict]:
    """Every well-formed record by version name (the last one of a name wins); {} when there are none."""
    grp = bookkeeping.open_group(f)
    if grp is None:
        return {}
    try:
        dsid = h5d.open(grp.id, LOG_NAME.encode())
        used = int(np.asarray(read_attr(dsid, "used", expect="int")).reshape(-1)[0])
        if used <= 0 or used > dsid.shape[0]:
            return {}
        blob = read_rows(dsid, 0, np.empty(used, np.uint8)).tobytes()
    except (KeyError, ValueError, RuntimeError, OSError):
        return {}
    records: dict[str, dict] = {}
    for rec in unpack_records(blob):
        if isinstance(rec, dict) and rec.get("f") == RECORD_FORMAT and isinstance(rec.get("v"), str):
            records[rec["v"]] = rec
    return records
