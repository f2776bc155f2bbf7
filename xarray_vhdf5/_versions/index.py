"""The persisted version index: names, parents and timestamps of every version group.

Without it, opening a file reads three attributes of every version group
(about 0.5-1 s at 1000 versions). The index holds what those attributes say in
two small datasets, so a fresh open reads two datasets and one attribute:

``/__vhdf5__/`` (this package's bookkeeping group, at the root: versioned-hdf5 2.6
never reads it, and listing ``_version_data`` does not show it; files written before
keep it at ``/_version_data/__vhdf5_version_index__/`` until their next write moves
it: :mod:`~xarray_vhdf5._versions.bookkeeping`)

- ``rows``: int64 ``(n, 2)``, one row per link of ``_version_data/versions``
  (``__first_version__`` excepted) in the order they were added: the
  ``timestamp`` (microseconds since 1970-01-01 UTC) and ``committed`` (0 for a
  group a crashed or running commit left with ``committed=False``, else 1);
- ``names``: uint8, for each row ``name NUL prev_version NUL`` in UTF-8;
- ``addresses``: int64 ``(n,)``, each row's version group's object address (-1:
  not known; files whose index was written before it existed get it at their
  next commit). Nothing reads it on open: it is the second way to the version
  groups, which :mod:`~xarray_vhdf5._versions.relink` takes when the versions
  group itself is damaged (a kill during libhdf5's flush of a plain h5py
  handle can tear its object header) and its links cannot be read;
- attribute ``fingerprint`` of ``rows``: int64[8] written last (the index's
  commit point): the index format (1), rows and bytes of ``names`` in use, and
  the state of the versions group the rows describe (:func:`fingerprint`).
  Both datasets are chunked, resizable and deflate-compressed (``BOOKKEEPING_FILTER``:
  every HDF5 tool reads them); a commit appends.

versioned-hdf5 never updates the index, so it is trusted only when the
fingerprint still matches the versions group. Everything versioned-hdf5 does to
the version list creates or removes links of that group (a commit adds one; a
deletion removes some and rewrites ``prev_version`` of the survivors;
re-creating a deleted name removes a link and creates one), so the fingerprint
is what changes with every link creation and removal:

- ``nlinks``: the number of links (``H5Gget_info``);
- ``max_corder``: for a group that tracks link creation order (those this
  package creates), HDF5's creation-order counter, which every new link
  increments and which never decreases: any creation, even of a deleted name,
  changes it. ``H5Gget_info`` answers both in O(1);
- ``links``: for a group that does not track creation order (created by
  versioned-hdf5), a SHA-1 over every link's name and object address, in name
  order: one pass over the link table, no version group opened. A group
  deleted and re-created under the same name in one
  session may get the freed address back, which this cannot see;
- ``addr``: the versions group's own address (a replaced group).

``current_version`` is not in the index: it is read from its attribute each time.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import weakref
from typing import NamedTuple

import h5py
import numpy as np
from h5py import h5d, h5f, h5i

from .._backend.h5attrs import read_attr, write_attr
from .._backend.h5objects import link_counters, object_address, object_address_by_name
from .._backend.hashtable import BOOKKEEPING_FILTER
from .._backend.layout import FIRST_VERSION, VERSION_INDEX
from .._backend.rows import read_rows, write_rows
from . import bookkeeping
from .timestamps import parse_timestamp

__all__ = [
    "INDEX_FORMAT",
    "INDEX_NAME",
    "NO_ADDRESS",
    "IndexEntries",
    "StoredIndex",
    "after_delete",
    "append",
    "fingerprint",
    "load",
    "read_addresses",
    "save",
    "scan",
    "state_after",
    "touch",
]

#: Name of the group inside ``_version_data`` that held the index in files written before
#: it moved to :data:`~xarray_vhdf5._versions.bookkeeping.PATH` (read there until then).
INDEX_NAME = VERSION_INDEX
#: Version of the index layout, in its fingerprint; another value means "rebuild".
INDEX_FORMAT = 1
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)


class IndexEntries:
    """The version groups of a file, as parallel lists (one entry per group).

    Attributes
    ----------
    names, parents : list of str
        Group names and their ``prev_version``.
    timestamps : numpy.ndarray of int64
        ``timestamp`` attributes, microseconds since 1970-01-01 UTC.
    committed : numpy.ndarray of bool
        ``committed`` attributes (False: a group left by a crashed or running commit).
    """

    def __init__(self, names: list[str], parents: list[str], timestamps: np.ndarray, committed: np.ndarray):
        self.names = names
        self.parents = parents
        self.timestamps = np.asarray(timestamps, dtype=np.int64)
        self.committed = np.asarray(committed, dtype=bool)

    def __len__(self) -> int:
        return len(self.names)


def to_micros(ts: _dt.datetime) -> int:
    """Microseconds since 1970-01-01 UTC of an aware datetime."""
    return (ts - _EPOCH) // _dt.timedelta(microseconds=1)


def from_micros(us: int) -> _dt.datetime:
    """The aware UTC datetime ``us`` microseconds after 1970-01-01 UTC."""
    return _EPOCH + _dt.timedelta(microseconds=int(us))


def _str(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def read_group_entry(grp: h5py.Group) -> tuple[str, int, bool]:
    """``(prev_version, timestamp in µs, committed)`` read from a version group's attributes.

    A group without a ``timestamp`` (not made by a commit: e.g. created by hand
    in the versions group) is reported as not committed (timestamp 0), so it is
    not taken for a version, as a group a crashed commit left behind; the
    other versions stay readable (versioned-hdf5 2.6 opens such a file too).
    """
    attrs = grp.attrs
    if "timestamp" not in attrs:
        return _str(attrs.get("prev_version", FIRST_VERSION)), 0, False
    return (
        _str(attrs.get("prev_version", FIRST_VERSION)),
        to_micros(parse_timestamp(attrs["timestamp"])),
        bool(attrs.get("committed", True)),
    )


def scan(versions: h5py.Group) -> IndexEntries:
    """Read the attributes of every version group (the slow path the index avoids)."""
    names, parents, stamps, committed = [], [], [], []
    for name in versions:
        if name == FIRST_VERSION:
            continue
        prev, ts, done = read_group_entry(versions[name])
        names.append(name)
        parents.append(prev)
        stamps.append(ts)
        committed.append(done)
    return IndexEntries(names, parents, np.array(stamps, np.int64), np.array(committed, bool))


# -- the fingerprint ------------------------------------------------------------------


def _tracks_order(versions: h5py.Group) -> bool:
    return bool(versions.id.get_create_plist().get_link_creation_order() & h5py.h5p.CRT_ORDER_TRACKED)


def quick_state(versions: h5py.Group, tracks_order: bool | None = None) -> tuple[int, int]:
    """``(number of links, creation-order counter or -1)`` of the versions group: one cheap call.

    Changes whenever a version is added or deleted, except (on a group that does
    not track creation order) a deletion and an addition that cancel out.
    ``tracks_order``: whether the group tracks creation order, when the caller
    knows it (it is fixed when the group is created).
    """
    counters = _creation_counters(versions, tracks_order)
    return counters if counters is not None else (len(versions), -1)


def _creation_counters(versions: h5py.Group, tracks_order: bool | None) -> tuple[int, int] | None:
    """``(nlinks, max_corder)`` from one ``H5Gget_info`` call; None for a group not tracking creation order."""
    if tracks_order is None:
        tracks_order = _tracks_order(versions)
    return link_counters(versions.id) if tracks_order else None


_ADDRESSES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _address(versions: h5py.Group) -> int:
    """The object address of the open group ``versions`` (fixed while it is open: asked once per id)."""
    gid = versions.id
    addr = _ADDRESSES.get(gid)
    if addr is None:
        addr = _ADDRESSES[gid] = object_address(gid)
    return addr


def fingerprint(versions: h5py.Group, tracks_order: bool | None = None) -> tuple[int, int, int, int, int]:
    """The state of the versions group the index must match (see the module docstring).

    ``tracks_order`` as for :func:`quick_state`.

    Returns
    -------
    tuple of 5 int
        ``(addr, nlinks, max_corder, digest_lo, digest_hi)``: for a group tracking
        creation order ``max_corder`` is HDF5's counter and the digest 0; for
        another, ``max_corder`` is -1 and the digest the first 16 bytes of a
        SHA-1 over every link's name and object address (as two int64).
    """
    addr = _address(versions)
    counters = _creation_counters(versions, tracks_order)
    if counters is not None:
        return (addr, *counters, 0, 0)
    digest = hashlib.sha1()
    count = [0]

    def visit(name: bytes, info) -> None:
        count[0] += 1
        digest.update(name)
        digest.update(b"\0%d\0" % info.u)

    versions.id.links.iterate(visit, info=True)
    lo, hi = np.frombuffer(digest.digest()[:16], dtype="<i8").tolist()
    return (addr, count[0], -1, lo, hi)


# -- reading and writing ----------------------------------------------------------------
#
# ``rows``: int64 (n, 2), columns timestamp (µs since 1970 UTC) and committed (0/1);
# ``names``: uint8, ``name NUL prev_version NUL`` per row; ``addresses``: int64 per row
# (not read on open, not in the fingerprint). The attribute ``fingerprint``
# of ``rows`` (int64[8]): INDEX_FORMAT, rows used, bytes of ``names`` used, then the
# five numbers of :func:`fingerprint`. Read with h5py's low-level API: a fresh open
# then costs two dataset opens, one attribute and two reads.

_FP_LEN = 8
#: Where the two datasets are looked for, in order (absolute: they resolve from any group of the file).
_PLACES = tuple((base + b"/rows", base + b"/names") for base in bookkeeping.SEARCH)
#: Fill value of ``addresses``: a row whose group's address is not known.
NO_ADDRESS = -1


class StoredIndex(NamedTuple):
    """A stored index found valid (:func:`stored_if_valid`), or just appended to (:func:`append`)."""

    rows: h5d.DatasetID
    fingerprint: np.ndarray  # int64[8], as stored
    names: h5d.DatasetID | None = None  # None: not opened yet
    rows_capacity: int | None = None  # extents (None: ask the dataset)
    names_capacity: int | None = None
    names_path: bytes = _PLACES[0][1]  # the ``names`` beside these ``rows``
    addresses: h5d.DatasetID | None = None  # None: not opened (or checked) yet
    addresses_capacity: int | None = None


def _addresses_path(names_path: bytes) -> bytes:
    return names_path.rsplit(b"/", 1)[0] + b"/addresses"


def _open_rows(vdata: h5py.Group) -> tuple[h5d.DatasetID, bytes]:
    """``rows`` (at the bookkeeping group's place, else the legacy one) and the path of its ``names``.

    Raises
    ------
    KeyError
        No index in either place.
    """
    gid = vdata.id
    (rows_path, names_path), (legacy_rows, legacy_names) = _PLACES
    try:
        return h5d.open(gid, rows_path), names_path
    except KeyError:
        if gid.links.exists(bookkeeping.SEARCH[0]):  # the group is at its place, without an index
            raise
    return h5d.open(gid, legacy_rows), legacy_names  # a file written before the move (KeyError: none)


def _stored(vdata: h5py.Group) -> StoredIndex | None:
    """The stored index if it has this format (not yet checked against the versions group), or None."""
    try:
        rows_id, names_path = _open_rows(vdata)
        fp = read_attr(rows_id, "fingerprint", expect="int")
    except (KeyError, ValueError, RuntimeError, OSError):  # absent, or damaged: scan instead
        return None
    if not isinstance(fp, np.ndarray) or fp.shape != (_FP_LEN,) or fp.dtype != np.dtype("<i8"):
        return None
    return StoredIndex(rows_id, fp, names_path=names_path) if fp[0] == INDEX_FORMAT else None


def _matches(fp: np.ndarray, versions: h5py.Group, tracks_order: bool | None = None) -> bool:
    return tuple(fp[3:].tolist()) == fingerprint(versions, tracks_order)


def stored_if_valid(
    vdata: h5py.Group, versions: h5py.Group, tracks_order: bool | None = None, held: StoredIndex | None = None
) -> StoredIndex | None:
    """The stored index (a handle for :func:`append`) if it describes the versions group now, else None.

    ``held``: what the last :func:`append` through this handle returned. Its
    datasets are still open and its fingerprint is the one written, so when
    that fingerprint matches the versions group nothing is opened or read.
    Anything else that changed the version list changed the fingerprint too,
    and the index is then read from the file.
    """
    if (
        held is not None
        and held.rows.valid
        and held.names is not None
        and held.names.valid
        and held.addresses is not None
        and held.addresses.valid
        and _matches(held.fingerprint, versions, tracks_order)
    ):
        return held
    stored = _stored(vdata)
    return stored if stored is not None and _matches(stored.fingerprint, versions, tracks_order) else None


def is_valid(vdata: h5py.Group, versions: h5py.Group, tracks_order: bool | None = None) -> bool:
    """True when the stored index describes the versions group as it is now."""
    return stored_if_valid(vdata, versions, tracks_order) is not None


def _read(dsid, n: int, dtype, row_shape=()) -> np.ndarray | None:
    shape = dsid.shape
    if shape[0] < n or tuple(shape[1:]) != row_shape:
        return None
    out = np.empty((n, *row_shape), dtype=dtype)
    return read_rows(dsid, 0, out) if n else out


def _split(blob: np.ndarray, n_bytes: int) -> list[str] | None:
    """``names``' first ``n_bytes`` as the strings between NULs (None: not UTF-8)."""
    try:
        return blob[:n_bytes].tobytes().decode("utf-8").split("\0")[:-1] if n_bytes else []
    except UnicodeDecodeError:
        return None


def _read_entries(vdata: h5py.Group, stored: StoredIndex) -> IndexEntries | None:
    """The rows and names a stored index holds, as its fingerprint counts them (None: damaged)."""
    n_rows, n_bytes = int(stored.fingerprint[1]), int(stored.fingerprint[2])
    try:
        rows = _read(stored.rows, n_rows, np.int64, (2,))
        blob = _read(h5d.open(vdata.id, stored.names_path), n_bytes, np.uint8)
    except (KeyError, ValueError, RuntimeError, OSError):
        # Absent, or damaged (a chunk that no longer decompresses after a crash): the
        # index is a cache, never the only copy, so the version groups are scanned.
        return None
    if rows is None or blob is None:
        return None
    parts = _split(blob, n_bytes)
    if parts is None or len(parts) != 2 * n_rows:
        return None
    return IndexEntries(parts[0::2], parts[1::2], rows[:, 0], rows[:, 1] != 0)


def load(vdata: h5py.Group, versions: h5py.Group) -> IndexEntries | None:
    """The stored index if it is present and matches the versions group, else None.

    Rows of groups left uncommitted are re-read from their attributes (a
    commit running when the index was written may have finished since).
    """
    stored = _stored(vdata)
    if stored is None or not _matches(stored.fingerprint, versions):
        return None
    entries = _read_entries(vdata, stored)
    if entries is None:
        return None
    for i in np.flatnonzero(~entries.committed):
        grp_v = versions.get(entries.names[i])
        if grp_v is None:
            return None
        prev, ts, done = read_group_entry(grp_v)
        entries.parents[i], entries.timestamps[i], entries.committed[i] = prev, ts, done
    return entries


def _blob(names: list[str], parents: list[str]) -> np.ndarray:
    text = "".join(f"{n}\0{p}\0" for n, p in zip(names, parents))
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8)


def _write_fingerprint(rows_ds: h5py.Dataset, versions: h5py.Group, n_rows: int, n_bytes: int) -> None:
    fp = np.array([INDEX_FORMAT, n_rows, n_bytes, *fingerprint(versions)], dtype="<i8")
    rows_ds.attrs.create("fingerprint", fp)


def save(vdata: h5py.Group, versions: h5py.Group, entries: IndexEntries) -> None:
    """Write the whole index (replacing any stored one) for the versions group as it is.

    The index group itself is kept (it also holds the file's write counters,
    :mod:`~xarray_vhdf5._versions.generation`); its two datasets are replaced.
    Written where the group is (:func:`~xarray_vhdf5._versions.bookkeeping.require_group`:
    a file not yet migrated keeps its legacy place until a mutation moves it).
    """
    grp = bookkeeping.require_group(vdata)
    for member in ("rows", "names", "addresses"):
        if member in grp:
            del grp[member]
    rows = np.stack([entries.timestamps, entries.committed.astype(np.int64)], axis=1).reshape(-1, 2)
    blob = _blob(entries.names, entries.parents)
    names_ds = grp.create_dataset(
        "names", shape=(max(len(blob), 1),), dtype=np.uint8, chunks=(4096,), maxshape=(None,), **BOOKKEEPING_FILTER
    )
    names_ds[: len(blob)] = blob
    rows_ds = grp.create_dataset(
        "rows", shape=(max(len(rows), 1), 2), dtype=np.int64, chunks=(256, 2), maxshape=(None, 2), **BOOKKEEPING_FILTER
    )
    rows_ds[: len(rows)] = rows
    _create_addresses(grp, _addresses_of(versions, entries.names))
    _write_fingerprint(rows_ds, versions, len(rows), len(blob))


def _addresses_of(versions: h5py.Group, names: list[str]) -> np.ndarray:
    """The object addresses of the groups ``names`` of ``versions`` (:data:`NO_ADDRESS` where unreadable)."""
    out = np.full(len(names), NO_ADDRESS, dtype=np.int64)
    gid = versions.id
    for i, name in enumerate(names):
        try:
            out[i] = object_address_by_name(gid, name.encode())
        except (KeyError, ValueError, RuntimeError, OSError):  # a damaged group: not to be relinked
            pass
    return out


def _create_addresses(grp: h5py.Group, addresses: np.ndarray) -> h5d.DatasetID:
    ds = grp.create_dataset(
        "addresses",
        shape=(max(len(addresses), 1),),
        dtype=np.int64,
        chunks=(256,),
        maxshape=(None,),
        fillvalue=NO_ADDRESS,
        **BOOKKEEPING_FILTER,
    )
    if len(addresses):
        ds[: len(addresses)] = addresses
    return ds.id


def _held_addresses(vdata: h5py.Group, versions: h5py.Group, stored: StoredIndex) -> h5d.DatasetID:
    """The ``addresses`` beside a stored index, created or completed for its rows (once per handle).

    A file whose index was written before ``addresses`` existed, or whose last
    commits were made by a version of this package without it, gets the
    missing addresses by name here: one ``H5Oget_info_by_name`` per version
    group, once (the handle then holds the dataset open).
    """
    path = _addresses_path(stored.names_path)
    n_rows = int(stored.fingerprint[1])
    try:
        dsid = h5d.open(vdata.id, path)
    except KeyError:
        dsid = None
    if dsid is not None and not (_read_addresses(dsid, n_rows) == NO_ADDRESS).any():
        return dsid
    entries = _read_entries(vdata, stored)
    if entries is None:  # names that do not split into rows: the addresses stay unknown
        found = np.full(n_rows, NO_ADDRESS, dtype=np.int64)
    else:
        found = _addresses_of(versions, entries.names)
    if dsid is None:
        return _create_addresses(h5py.Group(h5py.h5g.open(vdata.id, path.rsplit(b"/", 1)[0])), found)
    if dsid.shape[0] < n_rows:
        dsid.set_extent((n_rows,))
    if n_rows:
        write_rows(dsid, 0, found)
    return dsid


def _read_addresses(dsid: h5d.DatasetID, n_rows: int) -> np.ndarray:
    """The first ``n_rows`` of ``addresses`` (:data:`NO_ADDRESS` past its end)."""
    out = np.full(n_rows, NO_ADDRESS, dtype=np.int64)
    m = min(n_rows, dsid.shape[0])
    if m:
        read_rows(dsid, 0, out[:m])
    return out


def read_addresses(vdata: h5py.Group) -> tuple[IndexEntries, np.ndarray] | None:
    """Everything the stored index says, without checking it against the versions group.

    For :mod:`~xarray_vhdf5._versions.relink`, which needs it exactly when the
    versions group cannot be read (so its fingerprint cannot be compared).

    Returns
    -------
    (IndexEntries, numpy.ndarray) or None
        The rows the fingerprint counts, and their int64 addresses
        (:data:`NO_ADDRESS` where not known). None when there is no index or
        it cannot be read.
    """
    stored = _stored(vdata)
    entries = _read_entries(vdata, stored) if stored is not None else None
    if stored is None or entries is None:
        return None
    try:
        addresses = _read_addresses(h5d.open(vdata.id, _addresses_path(stored.names_path)), len(entries))
    except (KeyError, ValueError, RuntimeError, OSError):  # none stored (an index written before them), or damaged
        addresses = np.full(len(entries), NO_ADDRESS, dtype=np.int64)
    return entries, addresses


def append(
    vdata: h5py.Group,
    versions: h5py.Group,
    name: str,
    parent: str,
    timestamp: int,
    committed: bool,
    *,
    address: int = NO_ADDRESS,
    stored: StoredIndex | None = None,
    tracks_order: bool | None = None,
) -> StoredIndex:
    """Add one version's row to a stored index that was valid before the version was added.

    Costs O(1) in the number of versions (low-level h5py: two hyperslab writes and
    the fingerprint attribute rewritten in place). The caller checks validity
    before creating the version group (:func:`stored_if_valid`, whose result
    may be passed as ``stored`` to save reading it again); the fingerprint,
    written last, then describes the group with the new version. ``address``:
    the new version group's object address (``addresses``; :data:`NO_ADDRESS`
    when not known).

    Returns
    -------
    StoredIndex
        The index after this row, for ``stored_if_valid(held=...)`` before the
        next commit: both datasets stay open, so their last chunks stay in
        libhdf5's chunk cache (opening, reading, recompressing and writing them
        back at every commit, otherwise). Should the process die before libhdf5
        flushes them, whatever part of a row is missing reads as zeros: a
        ``committed`` of 0 (the row is then re-read from the version group) or
        names that no longer split into as many entries as rows (the index is
        rebuilt), never a wrong answer.
    """
    if stored is None:
        stored = _stored(vdata)
        assert stored is not None, "append() needs an index found valid before the version was added"
    rows_id, fp, names_id, rows_cap, names_cap, names_path, addr_id, addr_cap = stored
    if names_id is None:
        names_id = h5d.open(vdata.id, names_path)
    if addr_id is None:
        addr_id = _held_addresses(vdata, versions, stored)
        addr_cap = None
    if rows_cap is None or names_cap is None:
        rows_cap, names_cap = rows_id.shape[0], names_id.shape[0]
    if addr_cap is None:
        addr_cap = addr_id.shape[0]
    n_rows, n_bytes = int(fp[1]), int(fp[2])
    add = _blob([name], [parent])
    if rows_cap < n_rows + 1:
        rows_cap = max(n_rows + 1, 2 * rows_cap)
        rows_id.set_extent((rows_cap, 2))
    if addr_cap < n_rows + 1:
        addr_cap = max(n_rows + 1, 2 * addr_cap)
        addr_id.set_extent((addr_cap,))
    if names_cap < n_bytes + len(add):
        names_cap = max(n_bytes + len(add), 2 * names_cap)
        names_id.set_extent((names_cap,))
    write_rows(rows_id, n_rows, np.array([[timestamp, int(committed)]], dtype=np.int64))
    write_rows(names_id, n_bytes, add)
    write_rows(addr_id, n_rows, np.array([address], dtype=np.int64))
    new = np.array([INDEX_FORMAT, n_rows + 1, n_bytes + len(add), *fingerprint(versions, tracks_order)], dtype="<i8")
    write_attr(rows_id, "fingerprint", new)  # same type and extent: rewritten in place
    return StoredIndex(rows_id, new, names_id, rows_cap, names_cap, names_path, addr_id, addr_cap)


def state_after(stored: StoredIndex) -> tuple[int, int] | None:
    """:func:`quick_state` of the versions group :func:`append` just fingerprinted (None: ask the group).

    For a group tracking creation order both are the ``H5Gget_info`` counters.
    """
    fp = stored.fingerprint
    return (int(fp[4]), int(fp[5])) if fp[5] >= 0 else None


def touch(vdata: h5py.Group, versions: h5py.Group) -> None:
    """Re-stamp a stored index that still lists the right versions (e.g. after a failed
    commit created and removed a group: the creation-order counter moved on)."""
    stored = _stored(vdata)
    if stored is not None and writable(vdata) and not _matches(stored.fingerprint, versions):
        fp = stored.fingerprint
        _write_fingerprint(h5py.Dataset(stored.rows), versions, int(fp[1]), int(fp[2]))


def after_delete(
    vdata: h5py.Group, versions: h5py.Group, before: IndexEntries | None, doomed: set[str], reparent: dict[str, str]
) -> IndexEntries:
    """The entries after deleting ``doomed`` and re-parenting (name -> new parent); saved if writable.

    ``before``: the valid stored index read before the deletion started, or
    None (then the version groups are scanned).
    """
    if before is None:
        entries = scan(versions)
    else:
        keep = [i for i, n in enumerate(before.names) if n not in doomed]
        names = [before.names[i] for i in keep]
        parents = [reparent.get(before.names[i], before.parents[i]) for i in keep]
        entries = IndexEntries(names, parents, before.timestamps[keep], before.committed[keep])
    if writable(vdata):
        save(vdata, versions, entries)
    return entries


def writable(vdata: h5py.Group) -> bool:
    """True when the index may be written (file open writable, not in SWMR mode).

    h5py's ``File.mode`` and ``File.swmr_mode``, from one ``H5Fget_intent``
    (no ``h5py.File`` made: every reader's open asks).
    """
    intent = h5i.get_file_id(vdata.id).get_intent()
    return bool(intent & h5f.ACC_RDWR) and not intent & (h5f.ACC_SWMR_READ | h5f.ACC_SWMR_WRITE)
