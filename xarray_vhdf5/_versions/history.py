"""The version log: each version's parent, time, message, changed datasets and stored chunks.

Changed datasets
    A dataset changed in a version when, compared with the version's parent
    (``prev_version``), it was added or removed, or its shape, dtype, chunk
    mapping (which raw_data row each chunk maps to, or none: all fill value)
    or attributes (:func:`~.states.compared_attrs`) differ. ``vhdf5 diff PARENT
    VERSION --mappings-only`` reports the same datasets as differing; without
    ``--mappings-only`` it also reads the remapped chunks, and a chunk
    rewritten with equal values (``-0.0`` for ``0.0``, another NaN payload)
    then counts as unchanged there.

New chunks
    The raw_data chunks a version maps that no earlier version maps (earlier:
    its ancestors, then the others by timestamp): the chunks its commit
    stored. A chunk is stored once and every later version holding the same
    data maps it again (deduplication), so each is counted once, by the first
    version that maps it; a version that only reverts to or reuses earlier
    data stored nothing. Their size is
    given on disk (the bytes HDF5's chunk index records for each chunk, after
    compression) and uncompressed (points per chunk times the itemsize; edge
    chunks are stored padded to a whole chunk). For variable-length strings
    both count the chunk only, which holds references to the strings: the
    strings themselves live in HDF5's global heap and are not counted.

Nothing is read but the versions' mappings and attributes and raw_data's chunk
index: no chunk data. Comparing a dataset with its parent's is :mod:`.states`'s;
finding the version a key designates (a name, a position, a time) is :mod:`.lookup`'s.

How it is computed
    Decoding every version's mappings costs O(chunks) a version: 5-6 s for
    1000 daily appends. So each commit of this package also writes a small
    record of what the log needs (:mod:`~xarray_vhdf5._versions.logrecord`):
    a fingerprint per dataset it wrote (shape, dtype, chunks, raw_data, a
    digest of the mapping and one of the attributes), the paths it carried
    from the parent, and the hash-table rows it appended. The log reads them
    in one go and decodes only the versions whose record is missing or no
    longer holds: written by versioned-hdf5, re-parented by a deletion,
    damaged, or over hash-table rows rewritten since (a deletion that
    compacted them, ``modify_metadata``). A chunk is then owned by the
    recorded version that appended it, or by the first decoded version that
    maps it. Where that cannot match the definition above (a decoded version
    maps a chunk appended by a version after it in the log: timestamps given
    out of commit order; a recorded version may map a chunk nobody is known
    to have stored: a failed commit's, or a deleted version's), every
    version is decoded. Attributes whose digests differ while all else is
    equal are read and compared value by value. The result is the same
    either way (``tests/test_log_linear.py`` compares the two on such
    histories).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import h5py
import numpy as np
from h5py import h5a, h5d, h5g

from .._backend.chunkmap import build_slab_indices_and_offsets, version_dataset_layout
from .._backend.h5attrs import read_attr
from .._backend.h5objects import object_address_by_name
from .._backend.hashtable import hash_table_path, table_state
from .._backend.layout import FIRST_VERSION
from .._backend.names import MESSAGE_ATTR, is_netcdf_dimension_only
from . import logrecord
from .index import to_micros
from .logrecord import Fingerprint, fingerprint_of
from .registry import VersionInfo, VersionRegistry
from .states import DatasetState, changed_attrs, compared_attrs, version_states

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["LOG_COLUMNS", "LogEntry", "log_frame", "version_log"]


@dataclass(frozen=True)
class LogEntry:
    """One row of the version log.

    Attributes
    ----------
    name, parent : str
        The version and its ``prev_version``.
    timestamp : datetime.datetime
        Commit time (UTC).
    message : str or None
        The commit message.
    changed : tuple of str
        Paths of the datasets that differ from the parent (see the module
        docstring), sorted.
    new_chunks : int
        raw_data chunks first mapped by this version: the chunks it stored.
    new_bytes : int
        Their uncompressed size in bytes (whole chunks: edge chunks padded).
    new_bytes_on_disk : int
        Their size in the file in bytes, after compression (HDF5's chunk index).
    datasets : tuple of str
        Paths of the version's datasets, sorted.
    """

    name: str
    timestamp: _dt.datetime
    parent: str
    message: str | None
    changed: tuple[str, ...]
    new_chunks: int
    new_bytes: int
    new_bytes_on_disk: int = 0
    datasets: tuple[str, ...] = field(default=())


class _ChunkSizes:
    """Bytes on disk of raw_data chunks, from each raw_data's chunk index (read once, lazily)."""

    def __init__(self, f: h5py.File):
        self._f = f
        self._sizes: dict[str, dict[int, int]] = {}
        self._padded: dict[str, int] = {}

    def uncompressed(self, raw_path: str) -> int:
        """Bytes of one whole chunk of ``raw_path`` in memory."""
        if raw_path not in self._padded:
            raw = self._f[raw_path]
            self._padded[raw_path] = int(np.prod(raw.chunks)) * raw.dtype.itemsize
        return self._padded[raw_path]

    def on_disk(self, raw_path: str, rows: np.ndarray) -> int:
        """Bytes in the file of the chunks of ``raw_path`` starting at ``rows`` (0 if unallocated)."""
        sizes = self.by_row(raw_path)
        return sum(sizes.get(int(r), 0) for r in rows)

    def by_row(self, raw_path: str) -> dict[int, int]:
        """Bytes in the file of each allocated chunk of ``raw_path``, by its first row."""
        if raw_path not in self._sizes:
            sizes: dict[int, int] = {}

            def record(info) -> None:
                sizes[int(info.chunk_offset[0])] = int(info.size)

            self._f[raw_path].id.chunk_iter(record)
            self._sizes[raw_path] = sizes
        return self._sizes[raw_path]


def version_log(
    f: h5py.File, message_attr: str = MESSAGE_ATTR, *, records: bool = True, variables_only: bool = False
) -> list[LogEntry]:
    """The log of every committed version of ``f``, oldest first.

    See the module docstring for what counts as changed and as new chunks.

    Parameters
    ----------
    f : h5py.File
        A versioned file.
    message_attr : str
        Attribute of a version's group holding its commit message.
    records : bool
        Use the commits' log records where they hold (default; see the module
        docstring, "How it is computed"). False decodes every version's
        mappings: the same result, in time O(versions x chunks).
    variables_only : bool
        Leave out of ``changed`` the datasets a version holds as netCDF-4
        dimension scales that are not variables (a variable of the parent that
        became one), as ``ds.vhdf5.versions`` shows them. Default False:
        listed as changed (removed from the variables).

    Returns
    -------
    list of LogEntry
        One per committed version, by timestamp. New chunks are counted
        parents first: a version's own chunks are those no version committed
        before it maps (its ancestors, and the others by timestamp).

    Raises
    ------
    NotVersionedError
        ``f`` has no version history.
    """
    registry = VersionRegistry(f)
    names = registry.names()
    order = _parents_first(registry, names)
    entries = _recorded_log(f, registry, order, message_attr) if records else None
    if entries is None:
        entries = _computed_log(f, registry, order, message_attr)
    log = [entries[name] for name in names]
    if variables_only:
        log = [_without_dimension_only(registry.group, e) for e in log]
    return log


#: The columns of :func:`log_frame`, after its index ``name``.
LOG_COLUMNS = ("timestamp", "parent", "message", "changed", "new_chunks", "new_bytes", "new_bytes_on_disk")


def log_frame(entries: Sequence[LogEntry]) -> pd.DataFrame:
    """The version log as a DataFrame: one row per entry, in their order.

    The one table of the log: ``ds.vhdf5.versions`` and ``vhdf5 log`` show it.

    Parameters
    ----------
    entries : sequence of LogEntry
        :func:`version_log`.

    Returns
    -------
    pandas.DataFrame
        Index ``name`` (the version, str); columns (:data:`LOG_COLUMNS`)
        ``timestamp`` (datetime64, UTC), ``parent`` (str), ``message`` (str;
        missing, as pandas marks it, for none), ``changed`` (tuple of str), ``new_chunks``,
        ``new_bytes`` and ``new_bytes_on_disk`` (int64: chunks the version
        stored, their bytes uncompressed and in the file).
    """
    import pandas as pd  # here: ``vhdf5 log`` imports this module and not pandas

    frame = pd.DataFrame.from_records(
        [(e.name, *(getattr(e, c) for c in LOG_COLUMNS)) for e in entries], columns=["name", *LOG_COLUMNS]
    )
    frame["timestamp"] = pd.to_datetime(frame["timestamp"], utc=True)
    for column in ("new_chunks", "new_bytes", "new_bytes_on_disk"):
        frame[column] = frame[column].astype("int64")
    return frame.set_index("name")


def _without_dimension_only(versions: h5py.Group, entry: LogEntry) -> LogEntry:
    """``entry`` without the changed paths its version holds as dimension-only scales (read for those only)."""
    gone = [p for p in entry.changed if p not in entry.datasets]
    if not gone:
        return entry
    group = versions[entry.name]
    drop = {p for p in gone if isinstance(group.get(p), h5py.Dataset) and is_netcdf_dimension_only(group[p])}
    return replace(entry, changed=tuple(p for p in entry.changed if p not in drop)) if drop else entry


def _message(registry: VersionRegistry, name: str, message_attr: str) -> str | None:
    """The commit message of version ``name`` (low-level: no high-level Group made)."""
    gid = h5g.open(registry.group.id, name.encode())
    if not h5a.exists(gid, message_attr.encode()):
        return None
    message = read_attr(gid, message_attr)
    return None if message is None else str(message)


def _entry(registry: VersionRegistry, info: VersionInfo, message_attr: str, changed, datasets, new: tuple) -> LogEntry:
    """The log row of version ``info.name``; ``changed``, ``datasets``: paths; ``new``: chunks, bytes, bytes on disk."""
    name = info.name
    return LogEntry(
        name=name,
        timestamp=info.timestamp,
        parent=info.prev_version,
        message=_message(registry, name, message_attr),
        changed=tuple(sorted(changed)),
        new_chunks=int(new[0]),
        new_bytes=int(new[1]),
        new_bytes_on_disk=int(new[2]),
        datasets=tuple(sorted(datasets)),
    )


def _computed_log(f: h5py.File, registry: VersionRegistry, order: list[str], message_attr: str) -> dict[str, LogEntry]:
    """Every version's entry from its decoded mappings (O(chunks) a version)."""
    states: dict[str, dict[str, DatasetState]] = {FIRST_VERSION: {}}
    seen: dict[str, set[int]] = {}  # raw_data path -> rows mapped by an earlier version
    sizes = _ChunkSizes(f)
    entries: dict[str, LogEntry] = {}
    for name in order:
        info = registry.info(name)
        found = version_states(registry.group[name])
        mine = {path: state for path, (state, _) in found.items()}
        theirs = states.get(info.prev_version, {})
        changed = [p for p, s in mine.items() if p not in theirs or s.differs(theirs[p])]
        changed += [p for p in theirs if p not in mine]
        new_chunks = new_bytes = on_disk = 0
        for state, rows in found.values():
            earlier = seen.setdefault(state.raw_path, set())
            new = np.array([r for r in rows.tolist() if r not in earlier], dtype=np.uint64)
            earlier.update(new.tolist())
            new_chunks += len(new)
            if len(new):
                new_bytes += len(new) * sizes.uncompressed(state.raw_path)
                on_disk += sizes.on_disk(state.raw_path, new)
        states[name] = mine
        entries[name] = _entry(registry, info, message_attr, changed, mine, (new_chunks, new_bytes, on_disk))
    return entries


# -- the log from the commits' records ----------------------------------------------------


class _Table:
    """One raw_data's hash table, read once: who stored each chunk (its owner), and its bytes.

    Row ``k`` of the hash table is the ``k``-th chunk stored in raw_data, at
    raw_data row ``starts[k]``; ``owner[k]`` is the log position of the
    version that stored it (-1: none found yet).
    """

    def __init__(self, f: h5py.File, raw_path: str):
        raw = f[raw_path]
        table = h5py.Dataset(h5d.open(f.id, hash_table_path(raw)))
        n = table_state(table)[0]
        rows = table[:n] if n else np.zeros(0, dtype=table.dtype)
        self.f, self.raw_path, self.n = f, raw_path, n
        self.digests = np.asarray(rows["hash"], dtype=np.uint8).reshape(n, 32)
        self.starts = np.asarray(rows["shape"], dtype=np.int64).reshape(n, 2)[:, 0]
        self.owner = np.full(n, -1, dtype=np.int64)
        self._order: np.ndarray | None = None  # argsort of starts, made on first use
        self._sorted: np.ndarray | None = None

    def holds(self, n_after: int, digest: str) -> bool:
        """True when rows below ``n_after`` are as a commit left them (its last row's digest is still there)."""
        return n_after == 0 or (n_after <= self.n and self.digests[n_after - 1].tobytes().hex() == digest)

    def rows_of(self, offsets: np.ndarray) -> np.ndarray | None:
        """Hash-table rows of the chunks starting at raw_data rows ``offsets`` (None: one is not in the table)."""
        offsets = np.asarray(offsets, dtype=np.int64)
        if self._order is None or self._sorted is None:
            self._order = np.argsort(self.starts, kind="stable")
            self._sorted = self.starts[self._order]
        order, starts = self._order, self._sorted
        where = np.searchsorted(starts, offsets)
        if len(offsets) and (where.max() >= self.n or not np.array_equal(starts[where], offsets)):
            return None
        return order[where]


def _inherit(parent: dict[str, Fingerprint] | None, described: dict) -> dict[str, Fingerprint] | None:
    """A recorded version's fingerprints (:mod:`~xarray_vhdf5._versions.logrecord`, key ``d``), or None."""
    mine: dict[str, Fingerprint] = {}
    for path, entry in described.items():
        if isinstance(entry, list):
            mine[path] = Fingerprint.from_json(entry)
            continue
        source = (parent or {}).get(entry["src"])
        if source is None:
            return None
        if "a" in entry:
            if entry["l"] and not source.listed:  # became a variable: its mapping was not recorded
                return None
            source = source._replace(attrs=str(entry["a"]), listed=bool(entry["l"]))
        mine[path] = source
    return mine


def _same_objects(versions: h5py.Group, name: str, objects: dict) -> bool:
    """True when every dataset a record describes is still the object the commit made (by address)."""
    for path, addr in objects.items():
        try:
            if object_address_by_name(versions.id, f"{name}/{path}".encode()) != int(addr):
                return False
        except KeyError:
            return False
    return True


def _decoded(group: h5py.Group) -> tuple[dict[str, Fingerprint], dict[str, list[np.ndarray]]]:
    """Fingerprints of a version's datasets from its mappings, and the raw_data rows its listed ones map."""
    found: dict[str, Fingerprint] = {}
    rows: dict[str, list[np.ndarray]] = {}

    def visit(path: str, obj) -> None:
        if not (isinstance(obj, h5py.Dataset) and "raw_data" in obj.attrs and obj.is_virtual):
            return
        if is_netcdf_dimension_only(obj):
            found[path] = _UNLISTED
            return
        chunks, raw_path = version_dataset_layout(obj)
        indices, offsets = build_slab_indices_and_offsets(obj, obj.shape, chunks, raw_path)
        flat = np.flatnonzero(indices.reshape(-1))
        mapped = offsets.reshape(-1)[flat]
        found[path] = fingerprint_of(obj, flat, mapped, True)
        rows.setdefault(raw_path, []).append(mapped)

    group.visititems(visit)
    return found, rows


_UNLISTED = Fingerprint((), "", (), "", "", "", False)


def _differs(a: Fingerprint, b: Fingerprint, versions: h5py.Group, name: str, parent: str, path: str) -> bool:
    """:meth:`DatasetState.differs` on fingerprints: attributes read and compared only when their digests differ."""
    if a[:5] != b[:5]:
        return True
    if a.attrs == b.attrs:
        return False
    return bool(changed_attrs(compared_attrs(versions[name][path]), compared_attrs(versions[parent][path])))


def _recorded_log(
    f: h5py.File, registry: VersionRegistry, order: list[str], message_attr: str
) -> dict[str, LogEntry] | None:
    """The entries from the commits' records, decoding only versions without one that holds; None: compute all.

    A version's record is used when it names the version's parent and
    timestamp, its hash tables still hold the rows it saw (:meth:`_Table.holds`)
    and the datasets it carried are in its parent's fingerprints. Chunks are
    then owned by the recorded version that stored them, or by the first
    decoded version mapping them. None (the caller decodes every version) when
    that cannot match the definition of new chunks: a decoded version maps a
    chunk that a version after it in the log stored, or a recorded version may
    map a chunk no version is known to own (left by a failed commit, or by a
    deleted version).
    """
    stored = logrecord.load(f)
    if not stored:
        return None
    pos = {name: i for i, name in enumerate(order)}
    tables: dict[str, _Table] = {}

    def table(raw_path: str) -> _Table:
        if raw_path not in tables:
            tables[raw_path] = _Table(f, raw_path)
        return tables[raw_path]

    # Records that still describe their version (checked before anything is decoded).
    holding: dict[str, dict] = {}
    spans_of: dict[str, dict[str, tuple[int, int]]] = {}
    for name in order:
        info = registry.info(name)
        rec = stored.get(name)
        if rec is None or rec.get("p") != info.prev_version or rec.get("t") != to_micros(info.timestamp):
            continue
        try:
            spans = {str(p): (int(n0), int(n1), str(d)) for p, (n0, n1, d) in rec["h"].items()}
            if all(0 <= n0 <= n1 and table(p).holds(n1, d) for p, (n0, n1, d) in spans.items()) and _same_objects(
                registry.group, name, rec["o"]
            ):
                holding[name] = rec
                spans_of[name] = {p: (n0, n1) for p, (n0, n1, _) in spans.items()}
        except (KeyError, TypeError, ValueError, AttributeError, OSError, RuntimeError):
            continue
    if not holding:
        return None  # nothing saved: the computed path decodes every version once
    records: dict[str, dict[str, tuple[int, int]]] = {}
    fingerprints: dict[str, dict[str, Fingerprint]] = {FIRST_VERSION: {}}
    decoded: dict[str, dict[str, list[np.ndarray]]] = {}
    for name in order:
        mine = None
        if name in holding:
            try:
                mine = _inherit(fingerprints.get(registry.parent(name)), holding[name]["d"])
            except (KeyError, TypeError, ValueError, AttributeError):
                mine = None
            if mine is not None:
                records[name] = spans_of[name]
        if mine is None:
            mine, decoded[name] = _decoded(registry.group[name])
        fingerprints[name] = mine
    for name, kept in records.items():
        for p, (n0, n1) in kept.items():
            owner = tables[p].owner[n0:n1]
            if (owner != -1).any():
                return None
            owner[:] = pos[name]
    for name, found in decoded.items():  # in log order
        for p, parts in found.items():
            t = table(p)
            k = t.rows_of(np.unique(np.concatenate(parts)))
            if k is None:
                return None
            now = t.owner[k]
            if (now > pos[name]).any():
                return None
            t.owner[k[now == -1]] = pos[name]
    first_unowned = {p: int(np.argmax(t.owner < 0)) if (t.owner < 0).any() else t.n for p, t in tables.items()}
    latest = {p: np.maximum.accumulate(t.owner) for p, t in tables.items()}
    for name, kept in records.items():
        for p, (_, n1) in kept.items():
            if n1 and (first_unowned[p] < n1 or latest[p][n1 - 1] > pos[name]):
                return None
    counts = np.zeros(len(order), np.int64)
    raw_bytes = np.zeros(len(order), np.int64)
    disk = np.zeros(len(order), np.int64)
    sizes = _ChunkSizes(f)
    for p, t in tables.items():
        owned = t.owner >= 0
        if not owned.any():
            continue
        per = np.bincount(t.owner[owned], minlength=len(order))
        counts += per
        raw_bytes += per * sizes.uncompressed(p)
        on_disk = sizes.by_row(p)
        weights = np.array([on_disk.get(int(r), 0) for r in t.starts[owned].tolist()], dtype=np.float64)
        disk += np.rint(np.bincount(t.owner[owned], weights=weights, minlength=len(order))).astype(np.int64)
    entries: dict[str, LogEntry] = {}
    groups = registry.group
    for name in order:
        info = registry.info(name)
        mine = {p: fp for p, fp in fingerprints[name].items() if fp.listed}
        theirs = {p: fp for p, fp in fingerprints.get(info.prev_version, {}).items() if fp.listed}
        changed = [
            p
            for p, fp in mine.items()
            if p not in theirs or _differs(fp, theirs[p], groups, name, info.prev_version, p)
        ]
        changed += [p for p in theirs if p not in mine]
        i = pos[name]
        entries[name] = _entry(registry, info, message_attr, changed, mine, (counts[i], raw_bytes[i], disk[i]))
    return entries


def _parents_first(registry: VersionRegistry, names: list[str]) -> list[str]:
    """``names`` reordered so that every version comes after its parent (else in the given order).

    A parent was committed before its children even where timestamps given to
    ``stage_version`` say otherwise.
    """
    order: list[str] = []
    done = {FIRST_VERSION}
    for name in names:
        chain = []
        while name not in done and name in registry:
            chain.append(name)
            name = registry.parent(name)
        done.update(chain)
        order.extend(reversed(chain))
    return order
